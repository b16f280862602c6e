"""The four transport interfaces over Ray.

* Experience: an actor calls its learner's `put_experience` with its batches pickled
  into one `bytes` (one Ray actor call at a time per actor, so the batches arrive in
  order, and acting overlaps the transfer). While a call is in flight the actor gathers
  the next batches, up to a bound (`RayOptions.send_ahead` batches), and sends them all in
  its next call: fewer, larger calls when the learner is slow to take them. The learner's
  `Inbox`, bounded in sequences, takes a call's batches; a full inbox holds the call, which
  holds the actor once it has gathered the bound: back-pressure.
* Weights: the learner puts the arrays in the object store once per publish and registers
  the reference with the run's board; the board's reply to an actor's periodic report
  carries the latest reference, and the actor fetches the arrays by reference only when
  their version is newer than its own (no extra round trip per check), in a thread while
  it keeps acting. As actors learn of new weights only that way, the learner publishes at
  most once per report interval.
"""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from r2d2_agent.distributed.messages import (
    Experience,
    ExperienceReceiver,
    ExperienceSender,
    WeightsPublisher,
    WeightsSubscriber,
)
from r2d2_agent.distributed.ray_backend.board import PublishedWeights

__all__ = [
    "ActorCallSender",
    "Inbox",
    "InboxReceiver",
    "ObjectStorePublisher",
    "ObjectStoreSubscriber",
]

_WAIT_S = 0.1


class Inbox:
    """The learner's queue of experience batches, filled by actors' calls, bounded in
    sequences.

    A `put` waits while the inbox holds `capacity` sequences or more (so it holds at most
    `capacity` plus one batch less one).

    Args:
        capacity: Sequences it holds before `put` waits.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._batches: deque[list[Experience]] = deque()
        self._held = 0  # sequences in `_batches`
        self._changed = threading.Condition()
        self._open = True

    def put(self, items: list[Experience]) -> bool:
        """Adds a batch, waiting for room while the inbox is open; False once closed."""
        with self._changed:
            while self._open and self._held >= self._capacity:
                self._changed.wait(_WAIT_S)
            if not self._open:
                return False
            self._batches.append(items)
            self._held += len(items)
            self._changed.notify_all()
            return True

    def get(self, timeout: float) -> list[Experience] | None:
        """The next batch, waiting up to `timeout` seconds (None if there is none)."""
        with self._changed:
            if not self._batches and timeout > 0:
                self._changed.wait_for(lambda: bool(self._batches), timeout)
            if not self._batches:
                return None
            items = self._batches.popleft()
            self._held -= len(items)
            self._changed.notify_all()
            return items

    def close(self) -> None:
        """Refuses every waiting and later `put` (the learner stopped)."""
        with self._changed:
            self._open = False
            self._changed.notify_all()


class InboxReceiver(ExperienceReceiver):
    """Learner side: drains the `Inbox`, never more than `max_items` items per call."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._held: list[Experience] = []  # the rest of a batch larger than asked for

    def receive(self, max_items: int, timeout: float) -> list[Experience]:
        items = self._held
        if not items:
            items = self._inbox.get(timeout) or []
        while len(items) < max_items:
            more = self._inbox.get(0.0)
            if more is None:
                break
            items = items + more
        self._held = items[max_items:]
        return items[:max_items]

    def close(self) -> None:
        self._inbox.close()


class ActorCallSender(ExperienceSender):
    """Actor side: the batches go in `put_experience` calls on the learner's Ray actor,
    one call in flight at a time (so they arrive in order), pickled into one `bytes`.

    A `send` keeps the items for a later call and returns at once while fewer than
    `max_pending` items are kept and either less than `min_interval` seconds passed since
    the previous call or that call is still in flight; otherwise it waits for the call in
    flight (if any) and sends all the items kept. The send is refused (False) once the
    learner refused a call (it stopped) or is gone, or once `stopped()` is true while
    waiting.

    Args:
        learner: The learner's Ray actor handle.
        stopped: Whether the run is stopping (the actor's board reporter).
        max_pending: Items kept before a `send` waits for the call in flight (1: every
            send waits for the previous call).
        min_interval: Seconds between two calls while fewer than `max_pending` items are
            kept (0: a call per send once the previous one is done).
    """

    def __init__(
        self,
        learner: Any,
        stopped: Callable[[], bool],
        max_pending: int = 1,
        min_interval: float = 0.0,
    ) -> None:
        self._learner = learner
        self._stopped = stopped
        self._max_pending = max(1, int(max_pending))
        self._min_interval = float(min_interval)
        self._in_flight: Any = None
        self._last_call = -math.inf
        self._pending: list[Experience] = []
        self._refused = False
        self.calls = 0
        """`put_experience` calls made."""

    def send(self, items: list[Experience], timeout: float | None = None) -> bool:
        if self._refused:
            return False
        kept = len(self._pending)
        self._pending.extend(items)
        if len(self._pending) < self._max_pending:
            if time.monotonic() - self._last_call < self._min_interval:
                return True  # they go with a later call
            if self._in_flight is not None and not ray.wait([self._in_flight], timeout=0)[0]:
                return True
        if self._in_flight is not None:
            try:
                accepted = self._settle(timeout)
            except TimeoutError:
                del self._pending[kept:]  # not sent: the caller may send them again
                raise
            if not accepted:
                self._pending = []
                return False
        self._call()
        return True

    def _call(self) -> None:
        payload = pickle.dumps(self._pending, protocol=pickle.HIGHEST_PROTOCOL)
        self._in_flight = self._learner.put_experience.remote(payload)
        self._last_call = time.monotonic()
        self._pending = []
        self.calls += 1

    def _settle(self, timeout: float | None) -> bool:
        """Waits for the call in flight; whether the learner accepted it."""
        if self._in_flight is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                accepted = ray.get(self._in_flight, timeout=_WAIT_S)
            except GetTimeoutError:
                if self._stopped():
                    return False
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"the learner took no experience in {timeout} s") from None
                continue
            except RayActorError:  # the learner is gone: the run is stopping
                self._refused = True
                return False
            self._in_flight = None
            self._refused = not accepted
            return bool(accepted)

    def flush(self) -> bool:
        """Sends the items kept, after the call in flight (the actor's loop ended normally);
        False if the run is stopping (they are dropped then)."""
        if not self._pending or self._refused:
            return not self._refused
        if not self._settle(None):
            self._pending = []
            return False
        self._call()
        return True

    def close(self) -> None:
        """Drops the items kept (the call in flight goes on)."""
        self._in_flight = None
        self._pending = []


class ObjectStorePublisher(WeightsPublisher):
    """Learner side: one `ray.put` per publish, its reference registered with the board.

    Args:
        board: The run's board (a Ray actor handle).
        min_interval: Seconds between two publishes (`WeightsPublisher.min_interval`):
            the actors' report interval, as an actor learns of new weights only from
            the reply to its report, so a second publish within one interval would go
            unread (each is a `ray.put` of the arrays and a call on the board).
    """

    def __init__(self, board: Any, min_interval: float = 0.0) -> None:
        self._board = board
        self._version = 0
        self.min_interval = float(min_interval)

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        self._version += 1
        ref = ray.put([np.asarray(a) for a in arrays])
        self._board.publish.remote(PublishedWeights(self._version, [ref]))
        return self._version


class ObjectStoreSubscriber(WeightsSubscriber):
    """Actor side: fetches the latest published weights by reference when newer.

    With `background` (as the Ray actors use it), a fetch runs in a thread of its own: the
    `pull_if_newer` that finds a newer version starts it and returns None, and a later one
    returns the arrays once they are there. The actor keeps stepping meanwhile (a fetch asks the
    node's object store and may wait a few milliseconds on a busy machine) and takes the
    weights at most one `actor_sync_interval` later.

    Args:
        latest: Returns the latest `PublishedWeights` known (the actor's board reporter
            refreshes it with each report), or None before the first publish.
        background: Fetch in a thread (True) or within the call (False).
    """

    def __init__(
        self, latest: Callable[[], PublishedWeights | None], background: bool = False
    ) -> None:
        self._latest = latest
        self._version = 0
        self._pool: ThreadPoolExecutor | None = None
        if background:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weights-fetch")
        self._fetching: tuple[int, Future[list[np.ndarray]]] | None = None

    @property
    def version(self) -> int:
        return self._version

    def pull_if_newer(self) -> list[np.ndarray] | None:
        if self._fetching is not None:
            version, future = self._fetching
            if not future.done():
                return None
            self._fetching = None
            arrays = future.result()  # a failed fetch raises here, in the actor's loop
            self._version = version  # newer: a fetch starts only for a newer version
            return arrays
        published = self._latest()
        if published is None or published.version <= self._version:
            return None
        if self._pool is None:
            arrays = _fetch(published.refs[0])
            self._version = published.version
            return arrays
        self._fetching = (published.version, self._pool.submit(_fetch, published.refs[0]))
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._fetching = None


def _fetch(ref: Any) -> list[np.ndarray]:
    """The arrays behind a weights reference: writable copies, off the object store."""
    return [np.array(a) for a in ray.get(ref)]
