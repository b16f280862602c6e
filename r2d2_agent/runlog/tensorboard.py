"""`ScalarEventWriter`: TensorBoard scalars from any process, without TensorFlow.

`tf.summary` would load TensorFlow (about 600 MB and 2 s) into every process that logs,
numpy actors and the manager's parent included. TensorBoard's event files need none of it:
an event file is a sequence of TFRecord-framed `Event` protocol buffers, which the
`tensorboard` package (a dependency) encodes without TensorFlow (`event_pb2`,
`summary_pb2` and its `RecordWriter`). Scalars are written as `simple_value` summaries,
which TensorBoard's scalar dashboard and `tf.compat.v1.train.summary_iterator` read.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from typing import Any

__all__ = ["ScalarEventWriter"]

_FILE_NUMBERS = itertools.count()  # tells apart files one process opens in the same second


class ScalarEventWriter:
    """Appends scalar summaries to one event file in `logdir`.

    The file (`events.out.tfevents.<time>.<host>.<pid>.<n>`, the name TensorBoard looks
    for) is created on the first `scalars` call. A writer does not cross process
    boundaries: pickled, it leaves its file behind and opens a new one where it is used.

    Args:
        logdir: The folder TensorBoard shows as one run (created if needed).
    """

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        self.logdir = os.fspath(logdir)
        self.path: str | None = None
        """The event file (None before the first scalar)."""
        self._records: Any = None

    def _open(self) -> Any:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        os.makedirs(self.logdir, exist_ok=True)
        now = time.time()
        name = (
            f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_FILE_NUMBERS)}"
        )
        self.path = os.path.join(self.logdir, name)
        records = RecordWriter(open(self.path, "ab"))  # closed by close()
        header = event_pb2.Event(wall_time=now, file_version="brain.Event:2")
        records.write(header.SerializeToString())
        return records

    def scalars(self, step: int, values: dict[str, float | None]) -> None:
        """Writes `values` (tag -> number; None is skipped) as one event at `step`, and
        hands it to the operating system at once (one `write` per call: TensorBoard sees
        it while the run goes on, and a killed process loses nothing written)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        kept = [
            summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
            for tag, value in values.items()
            if value is not None
        ]
        if not kept:
            return
        if self._records is None:
            self._records = self._open()
        event = event_pb2.Event(
            wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=kept)
        )
        self._records.write(event.SerializeToString())
        self._records.flush()

    def close(self) -> None:
        """Closes the file (a later `scalars` call opens a new one)."""
        if self._records is not None:
            self._records.close()
            self._records = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_records": None, "path": None}
