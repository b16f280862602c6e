"""Experience through one pipe per actor: the multiprocessing `ExperienceSender` and
`ExperienceReceiver`.

One pipe per actor, not one shared queue: an actor killed in the middle of a write
(SIGKILL, the OOM killer) can corrupt or lock a queue shared by all actors (its writer
lock stays taken, a half-written message blocks the reader), while a private pipe just
reaches end-of-file and is dropped. A restarted actor gets a new pipe whose read end the
parent passes to the running learner over its control pipe (`ConnectActor`;
multiprocessing transfers `Connection` objects between processes). A pipe's bounded
kernel buffer is the back-pressure. The learner reads every actor pipe without blocking,
a piece at a time and never past the message it reads, so an actor frozen (SIGSTOP) in
the middle of a message never holds the learner (the stall watchdog restarts that actor,
and the learner goes on with the others) and what it did not read stays in the pipe.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import struct
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait

from r2d2_agent.distributed.messages import (
    ConnectActor,
    Experience,
    ExperienceReceiver,
    ExperienceSender,
)
from r2d2_agent.distributed.mp.bootstrap import ManagerGone
from r2d2_agent.distributed.mp.shared_state import SharedFlag

__all__ = ["PipeExperienceReceiver", "PipeExperienceSender"]

logger = logging.getLogger(__name__)


class PipeExperienceSender(ExperienceSender):
    """Sends pickled item batches through this actor's own pipe (bounded by the pipe).

    Writes are non-blocking, so a full pipe never stops the actor from seeing the stop
    flag or a timeout, even in the middle of a large message. The bytes on the wire are
    those of `Connection.send_bytes` (a `!i` length, or -1 and a `!Q` length, then
    the payload), so the learner reads them with `Connection.recv_bytes`. A message given
    up half-way closes the pipe, so the reader sees end-of-file instead of waiting.

    Args:
        conn: The write end of the actor's pipe.
        stop: Stop flag; a blocked `send` gives up once it is set.
        poll_interval: Seconds between stop checks while the pipe is full.
    """

    def __init__(self, conn: Connection, stop: SharedFlag, poll_interval: float = 0.1) -> None:
        self._conn, self._stop, self._poll = conn, stop, poll_interval
        os.set_blocking(conn.fileno(), False)

    def send(self, items: list[Experience], timeout: float | None = None) -> bool:
        """See `ExperienceSender.send`.

        Raises:
            TimeoutError: Still full after `timeout` s (the pipe is closed if a part of
                the message was written).
            BrokenPipeError: The learner closed its end while stop is not set.
        """
        if self._conn.closed:
            raise BrokenPipeError("experience pipe closed by an earlier failed send")
        payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        size = len(payload)
        header = (
            struct.pack("!i", size)
            if size <= 0x7FFFFFFF
            else struct.pack("!i", -1) + struct.pack("!Q", size)
        )
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
                        return self._give_up(
                            written, TimeoutError(f"experience pipe still full after {timeout} s")
                        )
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


_READ_CHUNK = 1 << 20


class _FrameReader:
    """Reads `Connection.send_bytes` frames (a `!i` length, or -1 and a `!Q` length, then
    the payload) from a pipe set non-blocking, whatever part of a frame has arrived.

    It reads at most one frame per `read`, and never a byte past it: what an actor sent
    beyond the frame stays in the pipe's kernel buffer, which is the back-pressure that
    holds actors to the learner's rate limit.
    """

    def __init__(self, conn: Connection) -> None:
        self._fd = conn.fileno()
        os.set_blocking(self._fd, False)
        self._buffer = bytearray()

    @property
    def partial(self) -> bool:
        """Whether part of a frame is buffered."""
        return bool(self._buffer)

    def _missing(self) -> int:
        """Bytes still missing to complete the buffered frame (0: it is complete)."""
        buffer = self._buffer
        if len(buffer) < 4:
            return 4 - len(buffer)
        (size,) = struct.unpack_from("!i", buffer, 0)
        start = 4
        if size == -1:
            if len(buffer) < 12:
                return 12 - len(buffer)
            (size,) = struct.unpack_from("!Q", buffer, 4)
            start = 12
        return max(start + size - len(buffer), 0)

    def read(self) -> tuple[bytes | None, bool]:
        """Reads what the pipe holds now, up to the end of one frame.

        Returns:
            The frame if it is now complete (else None), and whether the pipe reached end
            of file.
        """
        while True:
            missing = self._missing()
            if missing == 0:
                start = 12 if struct.unpack_from("!i", self._buffer, 0)[0] == -1 else 4
                frame = bytes(self._buffer[start:])
                self._buffer.clear()
                return frame, False
            try:
                chunk = os.read(self._fd, min(missing, _READ_CHUNK))
            except BlockingIOError:
                return None, False
            if not chunk:
                return None, True
            self._buffer += chunk


class PipeExperienceReceiver(ExperienceReceiver):
    """Receives item batches from many actor pipes; new pipes arrive on a control pipe.

    A pipe whose actor died (end of file, or a message cut short) is dropped; the items of
    a batch that do not fit in one `receive` are kept for the next.

    Args:
        control: Read end of the manager's control pipe; `ConnectActor` messages add
            actor pipes. End of file on it means the manager is gone.
        connections: Initial actor pipes.
    """

    def __init__(
        self, control: Connection | None = None, connections: Sequence[Connection] = ()
    ) -> None:
        self._control = control
        self._conns: list[Connection] = []
        self._readers: dict[Connection, _FrameReader] = {}
        self._pending: deque = deque()
        for conn in connections:
            self.add_connection(conn)

    @property
    def connections(self) -> int:
        """Number of open actor pipes."""
        return len(self._conns)

    def add_connection(self, conn: Connection) -> None:
        """Starts reading from another actor pipe (set non-blocking)."""
        self._conns.append(conn)
        self._readers[conn] = _FrameReader(conn)

    def _read(self, conn: Connection) -> None:
        if conn is self._control:
            try:
                message = conn.recv()
            except (EOFError, OSError) as exc:
                raise ManagerGone("the manager's control pipe closed: manager gone") from exc
            if not isinstance(message, ConnectActor):
                raise RuntimeError(f"unexpected control message {message!r}")
            self.add_connection(message.connection)
            return
        reader = self._readers[conn]
        try:
            frame, eof = reader.read()
        except OSError as exc:
            frame, eof = None, True
            logger.info("experience pipe failed (%s)", exc)
        if frame is not None:
            self._pending.extend(pickle.loads(frame))
        if eof:  # actor gone, maybe in the middle of a message
            cut = " in the middle of a message" if reader.partial else ""
            logger.info("dropping an experience pipe: its actor closed it%s", cut)
            self._conns.remove(conn)
            del self._readers[conn]
            conn.close()

    def receive(self, max_items: int, timeout: float) -> list[Experience]:
        """See `ExperienceReceiver.receive`."""
        out: list[Experience] = []
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
        self._readers.clear()
        self._pending.clear()
