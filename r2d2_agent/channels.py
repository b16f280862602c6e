"""Multiprocessing implementations of the transport interfaces used by `R2D2Manager`.

* Experience travels through one pipe per actor (`PipeExperienceSender` /
  `PipeExperienceReceiver`), not one shared queue: an actor killed in the middle of a
  write (SIGKILL, OOM killer) can corrupt or lock a queue shared by all actors (its
  writer lock stays taken, a half-written message blocks the reader), while a private
  pipe just reaches end-of-file and is dropped. A restarted actor gets a new pipe whose
  read end the parent passes to the running learner over its control pipe (multiprocessing
  transfers `Connection` objects between processes).
* Weights go through a `SharedWeights` segment the manager creates and owns; the learner
  writes it through an `AttachedWeightsPublisher`, actors read it with
  `r2d2_agent.transport.SharedWeightsSubscriber`.
* Progress counters (`RunCounters`) are lock-free shared arrays with one writer per slot,
  and the stop flag (`SharedFlag`) is a lock-free shared byte: a process killed while
  holding a multiprocessing lock (as `Event.is_set` takes) would deadlock everyone else.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import select
import struct
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from r2d2_agent.transport import ExperienceReceiver, ExperienceSender, WeightsPublisher
from r2d2_agent.weights import SharedWeights, SharedWeightsHandle

logger = logging.getLogger(__name__)


class SharedFlag:
    """A lock-free stop flag in shared memory (pass it as a Process argument)."""

    def __init__(self, ctx: BaseContext) -> None:
        self._value = ctx.RawValue(ctypes.c_int8, 0)

    def set(self) -> None:
        """Raises the flag."""
        self._value.value = 1

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return bool(self._value.value)


class RunCounters:
    """Lock-free shared counters of a run; every slot has exactly one writer.

    Attributes:
        actor_steps: env steps per actor index (written by that actor).
        learner: learner updates, sequences received, env steps received, weights version.
        loss: the learner's latest loss.
    """

    LEARNER_FIELDS = ("updates", "sequences", "env_steps", "version")

    def __init__(self, ctx: BaseContext, actor_num: int) -> None:
        self.actor_steps = ctx.RawArray(ctypes.c_int64, actor_num)
        self.learner = ctx.RawArray(ctypes.c_int64, len(self.LEARNER_FIELDS))
        self.loss = ctx.RawValue(ctypes.c_double, float("nan"))
        self._steps_view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_steps_view": None}

    def total_steps(self) -> int:
        """Env steps summed over all actors."""
        if self._steps_view is None:
            self._steps_view = np.frombuffer(self.actor_steps, dtype=np.int64)
        return int(self._steps_view.sum())

    def learner_value(self, field: str) -> int:
        """One of `LEARNER_FIELDS`, as a Python int."""
        return int(self.learner[self.LEARNER_FIELDS.index(field)])


# ------------------------------------------------------------- experience pipes --------
class PipeExperienceSender(ExperienceSender):
    """Sends pickled item batches through this actor's own pipe (bounded by the pipe).

    Writes are non-blocking, so a full pipe never stops the actor from seeing the stop
    flag or a timeout, even in the middle of a large message. The bytes on the wire are
    those of `Connection.send_bytes` (a ``!i`` length, or -1 and a ``!Q`` length, then
    the payload), so the learner reads them with `Connection.recv_bytes`. A message given
    up half-way closes the pipe, so the reader sees end-of-file instead of waiting.

    Args:
        conn: the write end of the actor's pipe.
        stop: stop flag; a blocked `send` gives up once it is set.
        poll_interval: seconds between stop checks while the pipe is full.
    """

    def __init__(self, conn: Connection, stop: SharedFlag, poll_interval: float = 0.1) -> None:
        self._conn, self._stop, self._poll = conn, stop, poll_interval
        os.set_blocking(conn.fileno(), False)

    def send(self, items: list, timeout: float | None = None) -> bool:
        """See `ExperienceSender.send`.

        Raises:
            TimeoutError: still full after `timeout` s (the pipe is closed if a part of
                the message was written).
            BrokenPipeError: the learner closed its end while stop is not set.
        """
        if self._conn.closed:
            raise BrokenPipeError("experience pipe closed by an earlier failed send")
        payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        size = len(payload)
        header = (struct.pack("!i", size) if size <= 0x7FFFFFFF
                  else struct.pack("!i", -1) + struct.pack("!Q", size))
        deadline = None if timeout is None else time.monotonic() + timeout
        fd, written = self._conn.fileno(), 0
        for view in (memoryview(header), memoryview(payload)):
            while view:
                if self._stop.is_set():
                    return self._give_up(written, None)
                wait_s = self._poll
                if deadline is not None:
                    wait_s = min(wait_s, deadline - time.monotonic())
                    if wait_s <= 0:
                        return self._give_up(written, TimeoutError(
                            f"experience pipe still full after {timeout} s"))
                if not select.select([], [fd], [], wait_s)[1]:
                    continue
                try:
                    n = os.write(fd, view)
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    if self._stop.is_set():
                        return False
                    raise
                view, written = view[n:], written + n
        return True

    def _give_up(self, written: int, error: Exception | None) -> bool:
        if written:  # a cut message: close so that the reader gets end-of-file
            self._conn.close()
        if error is not None:
            raise error
        return False

    def close(self) -> None:
        """Closes the write end."""
        self._conn.close()


class PipeExperienceReceiver(ExperienceReceiver):
    """Receives item batches from many actor pipes; new pipes arrive on a control pipe.

    A pipe whose actor died (end of file, or a message cut short) is dropped; the items of
    a batch that do not fit in one `receive` are kept for the next.

    Args:
        control: read end of the manager's control pipe; ``("connect", index, conn)``
            messages add actor pipes. End of file on it means the manager is gone.
        connections: initial actor pipes.
    """

    def __init__(self, control: Connection | None = None,
                 connections: Sequence[Connection] = ()) -> None:
        self._control = control
        self._conns: list[Connection] = list(connections)
        self._pending: deque = deque()

    @property
    def connections(self) -> int:
        """Number of open actor pipes."""
        return len(self._conns)

    def add_connection(self, conn: Connection) -> None:
        """Starts reading from another actor pipe."""
        self._conns.append(conn)

    def _read(self, conn: Connection) -> None:
        if conn is self._control:
            try:
                message = conn.recv()
            except (EOFError, OSError) as exc:
                raise RuntimeError("the manager's control pipe closed: manager gone") from exc
            if message[0] != "connect":
                raise RuntimeError(f"unexpected control message {message[0]!r}")
            self.add_connection(message[2])
            return
        try:
            self._pending.extend(pickle.loads(conn.recv_bytes()))
        except (EOFError, OSError) as exc:  # actor gone, maybe in the middle of a message
            logger.info("dropping an experience pipe (%s)", exc or type(exc).__name__)
            self._conns.remove(conn)
            conn.close()

    def receive(self, max_items: int, timeout: float) -> list:
        """See `ExperienceReceiver.receive`."""
        out: list = []
        deadline = time.monotonic() + max(timeout, 0.0)
        while len(out) < max_items:
            while self._pending and len(out) < max_items:
                out.append(self._pending.popleft())
            if len(out) >= max_items:
                break
            sources = self._conns + ([self._control] if self._control is not None else [])
            remaining = 0.0 if out else max(0.0, deadline - time.monotonic())
            if not sources:
                time.sleep(remaining)
                break
            ready = wait(sources, remaining)
            if not ready:
                break
            for conn in ready:
                self._read(conn)
        return out

    def close(self) -> None:
        """Closes all actor pipes (not the control pipe)."""
        for conn in self._conns:
            conn.close()
        self._conns.clear()
        self._pending.clear()


class AttachedWeightsPublisher(WeightsPublisher):
    """Publishes into a segment the manager created (the manager owns and unlinks it)."""

    def __init__(self, handle: SharedWeightsHandle) -> None:
        self._weights = SharedWeights.attach(handle, writer=True)

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See `WeightsPublisher.publish`."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()
