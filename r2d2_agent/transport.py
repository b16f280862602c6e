"""Narrow, backend-agnostic interfaces between the actor/learner loops and the transport.

Actors use ``ExperienceSender.send(items)`` and ``WeightsSubscriber.pull_if_newer()``;
the learner uses ``ExperienceReceiver.receive(max_items, timeout)`` and
``WeightsPublisher.publish(arrays)``. A process builds its side from a picklable *handle*
(``handle.make_sender()`` / ``handle.make_subscriber()``), so another backend (e.g. Ray)
only has to provide other handles. The multiprocessing backend below uses a bounded
spawn-context ``Queue`` (one element per batch of items) and ``SharedWeights``.

Pickling: ``SharedWeightsSubscriberHandle`` is plain data (``pickle.dumps`` works).
``MPChannelHandle`` holds a multiprocessing Queue and Event, which multiprocessing only
pickles while starting a process: pass it as a ``ctx.Process(args=...)`` argument.
"""

from __future__ import annotations

import abc
import collections
import logging
import multiprocessing
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from r2d2_agent.weights import SharedWeights, SharedWeightsHandle, WeightsSpec

logger = logging.getLogger(__name__)


class ExperienceSender(abc.ABC):
    """Actor side of the experience channel."""

    @abc.abstractmethod
    def send(self, items: list, timeout: float | None = None) -> bool:
        """Sends a small batch of items, blocking while the channel is full.

        Returns:
            True once enqueued; False if the stop event is set (nothing is sent then).

        Raises:
            TimeoutError: Still full after ``timeout`` seconds (None: wait until stop).
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the sender's resources."""


class ExperienceReceiver(abc.ABC):
    """Learner side of the experience channel."""

    @abc.abstractmethod
    def receive(self, max_items: int, timeout: float) -> list:
        """Waits up to ``timeout`` s for the first item, then drains up to ``max_items``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the receiver's resources."""


class WeightsPublisher(abc.ABC):
    """Learner side of the weights channel."""

    @abc.abstractmethod
    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """Makes ``arrays`` the current weights; returns the new version (1, 2, ...)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the publisher's resources."""


class WeightsSubscriber(abc.ABC):
    """Actor side of the weights channel."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Version of the weights last returned by ``pull_if_newer`` (0: none yet)."""

    @abc.abstractmethod
    def pull_if_newer(self) -> list[np.ndarray] | None:
        """Returns the latest weights if newer than ``version``, else None."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the subscriber's resources."""


# ------------------------------------------------------ multiprocessing backend ------
class QueueExperienceSender(ExperienceSender):
    """Puts batches on a bounded ``multiprocessing`` Queue, with back-pressure.

    Args:
        q: The bounded queue shared with the receiver.
        stop_event: When set, ``send`` gives up and returns False.
        send_timeout: Default ``send`` timeout (None: wait until stop).
        poll_interval: How often a blocked ``send`` checks the stop event, in seconds.
    """

    def __init__(self, q: Any, stop_event: Any, send_timeout: float | None = None,
                 poll_interval: float = 0.1) -> None:
        self._q, self._stop = q, stop_event
        self._send_timeout, self._poll = send_timeout, poll_interval

    def send(self, items: list, timeout: float | None = None) -> bool:
        """See ``ExperienceSender.send``; the whole list is one queue element."""
        if not items:
            return not self._stop.is_set()
        timeout = self._send_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop.is_set():
            wait = self._poll
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError(f"experience queue still full after {timeout} s")
            try:
                self._q.put(items, timeout=wait)
                return True
            except queue.Full:
                continue
        return False

    def close(self, drop_pending: bool | None = None) -> None:
        """Closes this process's end of the queue.

        Args:
            drop_pending: Do not wait for buffered batches to reach the pipe (else a
                process could hang at exit on a full pipe). Default: stop is set.
        """
        self._q.close()
        if self._stop.is_set() if drop_pending is None else drop_pending:
            self._q.cancel_join_thread()
        else:
            self._q.join_thread()


class QueueExperienceReceiver(ExperienceReceiver):
    """Gets batches from the queue and hands out at most ``max_items`` items at a time.

    Items of a batch that do not fit are kept for the next ``receive``. Never calls
    ``Queue.qsize()`` (not implemented on macOS).
    """

    def __init__(self, q: Any) -> None:
        self._q = q
        self._pending: collections.deque = collections.deque()

    def receive(self, max_items: int, timeout: float) -> list:
        """See ``ExperienceReceiver.receive``. Returns [] if nothing came in time."""
        if max_items <= 0:
            return []
        out: list = []
        self._take_pending(out, max_items)
        first = not out
        while len(out) < max_items:
            try:
                batch = self._q.get(True, timeout) if first and timeout > 0 else self._q.get(False)
            except queue.Empty:
                break
            first = False
            self._pending.extend(batch)
            self._take_pending(out, max_items)
        return out

    def close(self) -> None:
        """Drops pending items and closes this process's end of the queue."""
        self._pending.clear()
        self._q.close()

    def _take_pending(self, out: list, max_items: int) -> None:
        while self._pending and len(out) < max_items:
            out.append(self._pending.popleft())

    def drain(self, duration: float = 0.5) -> int:
        """Discards items for ``duration`` s so blocked senders can exit; returns the count."""
        n, end = len(self._pending), time.monotonic() + duration
        self._pending.clear()
        while time.monotonic() < end:
            try:
                n += len(self._q.get(timeout=max(0.0, min(0.05, end - time.monotonic()))))
            except queue.Empty:
                continue
        return n


@dataclass(frozen=True)
class MPChannelHandle:
    """What an actor process needs to build its ``QueueExperienceSender``.

    Pass it as a ``ctx.Process`` argument (multiprocessing pickles its Queue/Event then).
    """

    queue: Any
    stop_event: Any
    send_timeout: float | None = None
    poll_interval: float = 0.1

    def make_sender(self) -> QueueExperienceSender:
        """Builds the sender in the current process."""
        return QueueExperienceSender(self.queue, self.stop_event, self.send_timeout,
                                     self.poll_interval)


def make_mp_channel(
    ctx: BaseContext | None = None, maxsize: int = 64, *, stop_event: Any = None,
    send_timeout: float | None = None,
) -> tuple[MPChannelHandle, QueueExperienceReceiver]:
    """Creates a bounded experience channel.

    Args:
        ctx: multiprocessing context; default ``get_context("spawn")``.
        maxsize: Most batches in flight; a full queue blocks senders (back-pressure).
        stop_event: Event of ``ctx`` shared by the run; a new one if None.
        send_timeout: Default timeout of ``send`` (None: wait until stop).

    Returns:
        ``(handle, receiver)``: give ``handle`` to actors, keep ``receiver``.
    """
    if maxsize <= 0:
        raise ValueError(f"maxsize must be > 0 (bounded queue), got {maxsize}")
    ctx = multiprocessing.get_context("spawn") if ctx is None else ctx
    stop_event = ctx.Event() if stop_event is None else stop_event
    q = ctx.Queue(maxsize=maxsize)
    return MPChannelHandle(q, stop_event, send_timeout), QueueExperienceReceiver(q)


class SharedWeightsPublisher(WeightsPublisher):
    """Owns a ``SharedWeights`` segment (made from ``spec``, named by ``name_prefix``)."""

    def __init__(self, spec: WeightsSpec, name_prefix: str = "r2d2") -> None:
        self._weights = SharedWeights.create(spec, name_prefix=name_prefix)

    @property
    def subscriber_handle(self) -> SharedWeightsSubscriberHandle:
        """Picklable handle from which an actor builds its subscriber."""
        return SharedWeightsSubscriberHandle(self._weights.handle)

    @property
    def version(self) -> int:
        """Latest published version."""
        return self._weights.version()

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See ``WeightsPublisher.publish``."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches and unlinks the segment (idempotent)."""
        self._weights.close()
        self._weights.unlink()


class SharedWeightsSubscriber(WeightsSubscriber):
    """Reads new weights from a ``SharedWeights`` segment.

    Args:
        handle: From ``SharedWeightsPublisher.subscriber_handle``.
        reuse_buffers: Return the same preallocated arrays on every pull (no allocation,
            but the previous result is overwritten); else fresh arrays each time.
    """

    def __init__(self, handle: SharedWeightsHandle, reuse_buffers: bool = False) -> None:
        self._weights = SharedWeights.attach(handle)
        self._out = handle.spec.allocate() if reuse_buffers else None
        self._version = 0

    @property
    def version(self) -> int:
        """See ``WeightsSubscriber.version``."""
        return self._version

    def pull_if_newer(self) -> list[np.ndarray] | None:
        """See ``WeightsSubscriber.pull_if_newer``."""
        got = self._weights.read_if_newer(self._version, out=self._out)
        if got is None:
            return None
        self._version, arrays = got
        return arrays

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()


@dataclass(frozen=True)
class SharedWeightsSubscriberHandle:
    """Picklable: an actor calls ``make_subscriber()`` in its own process."""

    weights: SharedWeightsHandle
    reuse_buffers: bool = False

    def make_subscriber(self) -> SharedWeightsSubscriber:
        """Attaches to the segment in the current process."""
        return SharedWeightsSubscriber(self.weights, self.reuse_buffers)
