"""Run-directory files and the one way they are written: whole lines, one writer per file.

Several processes log into one run directory at once (every actor, the learner, the
parent). Each process writes only its own file (`actor-<i>.jsonl`, `learner.jsonl`, ...),
so no two writers ever share a file, and each record is one line handed to the kernel in
a single `os.write` on a file opened with `O_APPEND`. Hence no interleaved lines (one
writer per file) and no torn lines while the writer lives (a line is never split across
writes); a writer killed in the middle of its one write can leave at most a partial last
line, which `read_run` skips. A restarted actor appends to the file of its index after
its predecessor died, so there is still one writer at a time. The simpler alternative,
one shared file with a lock, would make a process killed while holding the lock block
every other writer.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

__all__ = [
    "ACTOR_FILE",
    "EVAL_FILE",
    "INFO_FILE",
    "LEARNER_FILE",
    "METRICS_FILE",
    "JsonLinesWriter",
    "actor_file",
    "metrics_file",
    "write_json_atomic",
]

ACTOR_FILE = "actor-{index}.jsonl"
"""Per actor: one record per finished episode (`time`, `actor`, `episode`,
`episode_return`, `episode_length`, `epsilon`, `env_steps` of that actor)."""
LEARNER_FILE = "learner.jsonl"
"""One record every `interval` learner updates (`time`, `updates`, `env_steps`, `loss`,
`mean_q_network` (mean Q of the trained steps, in the network's rescaled units),
`mean_q_return` (h⁻¹ of it, times the reward scale with `normalize_rewards`: return
units), `mean_priority`, `replay_size`, `updates_per_second`, `env_steps_per_second`).
Files of earlier versions have `mean_q` (network units) instead; `read_run` names it
`mean_q_network`."""
EVAL_FILE = "eval.jsonl"
"""One record per evaluation (`time`, `env_steps`, `mean_return`, `returns`)."""
METRICS_FILE = "metrics-{process}.jsonl"
"""Per process ("agent", "parent", "learner", "actor-<i>"): one record per custom metric
value (`R2D2Callback.log_metric`): `time`, `process`, `name`, `value`, `env_steps` (the
run's, when logged), `updates` (learner updates; null in actors)."""
INFO_FILE = "run.json"
"""The run's description: `config`, `library_version`, `started` (Unix time)."""


def actor_file(index: int) -> str:
    """File name of actor `index`'s episodes."""
    return ACTOR_FILE.format(index=int(index))


def metrics_file(process: str) -> str:
    """File name of process `process`'s custom metrics."""
    return METRICS_FILE.format(process=process)


def _plain(value: Any) -> Any:
    """JSON-safe values: numpy scalars become Python numbers, NaN and inf become None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonLinesWriter:
    """Appends records to a JSON-lines file, one `os.write` per line.

    The file is opened on the first record (its directory is created then), in append
    mode, so a resumed run or a restarted process continues the same file. A writer does
    not cross process boundaries: pickled, it leaves its file descriptor behind.

    Args:
        path: The file to append to.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        """Appends `record` as one line (NaN and inf are written as null)."""
        line = (json.dumps(_plain(record), separators=(",", ":")) + "\n").encode()
        if self._fd is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        written = os.write(self._fd, line)
        while written < len(line):  # only on a full disk or a signal; still one writer
            written += os.write(self._fd, line[written:])

    def close(self) -> None:
        """Closes the file (a later `write` reopens it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None}


def write_json_atomic(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Writes `data` as a JSON file through a temporary file and a rename."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(_plain(data), file, indent=2, sort_keys=True)
    os.replace(tmp, path)
