"""The four transport interfaces over Ray.

* Experience: an actor calls its learner's `put_experience` (one Ray actor call per batch
  of `send_batch_size` sequences, at most one in flight per actor, so acting overlaps the
  transfer); the learner's bounded `Inbox` takes it, and a full inbox holds the call, which
  holds the actor's next send: back-pressure.
* Weights: the learner puts the arrays in the object store once per publish and registers
  the reference with the run's board; the board's reply to an actor's periodic report
  carries the latest reference, and the actor fetches the arrays by reference only when
  their version is newer than its own (no extra round trip per check).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
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
    """The learner's bounded queue of experience batches, filled by actors' calls.

    Args:
        maxsize: Batches it holds before `put` waits.
    """

    def __init__(self, maxsize: int) -> None:
        self._queue: queue.Queue[list[Experience]] = queue.Queue(maxsize=maxsize)
        self._open = threading.Event()
        self._open.set()

    def put(self, items: list[Experience]) -> bool:
        """Adds a batch, waiting for room while the inbox is open; False once closed."""
        while self._open.is_set():
            try:
                self._queue.put(items, timeout=_WAIT_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, timeout: float) -> list[Experience] | None:
        """The next batch, waiting up to `timeout` seconds (None if there is none)."""
        try:
            if timeout <= 0:
                return self._queue.get_nowait()
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Refuses every waiting and later `put` (the learner stopped)."""
        self._open.clear()


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
    """Actor side: each `send` is one `put_experience` call on the learner's Ray actor.

    A call stays in flight while the actor goes on acting; the next `send` first waits
    for it. The send is refused (False) once the learner refuses a batch (it stopped) or
    is gone, or once `stopped()` is true while waiting.

    Args:
        learner: The learner's Ray actor handle.
        stopped: Whether the run is stopping (the actor's board reporter).
    """

    def __init__(self, learner: Any, stopped: Callable[[], bool]) -> None:
        self._learner = learner
        self._stopped = stopped
        self._in_flight: Any = None

    def send(self, items: list[Experience], timeout: float | None = None) -> bool:
        if not self._settle(timeout):
            return False
        self._in_flight = self._learner.put_experience.remote(items)
        return True

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
                return False
            self._in_flight = None
            return bool(accepted)

    def close(self) -> None:
        self._in_flight = None


class ObjectStorePublisher(WeightsPublisher):
    """Learner side: one `ray.put` per publish, its reference registered with the board.

    Args:
        board: The run's board (a Ray actor handle).
    """

    def __init__(self, board: Any) -> None:
        self._board = board
        self._version = 0

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        self._version += 1
        ref = ray.put([np.asarray(a) for a in arrays])
        self._board.publish.remote(PublishedWeights(self._version, [ref]))
        return self._version


class ObjectStoreSubscriber(WeightsSubscriber):
    """Actor side: fetches the latest published weights by reference when newer.

    Args:
        latest: Returns the latest `PublishedWeights` known (the actor's board reporter
            refreshes it with each report), or None before the first publish.
    """

    def __init__(self, latest: Callable[[], PublishedWeights | None]) -> None:
        self._latest = latest
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def pull_if_newer(self) -> list[np.ndarray] | None:
        published = self._latest()
        if published is None or published.version <= self._version:
            return None
        arrays = ray.get(published.refs[0])
        self._version = published.version
        return [np.array(a) for a in arrays]  # writable copies, off the object store
