"""Reading a run directory back: `read_run(directory) -> RunLog`."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from r2d2_agent.runlog.files import EVAL_FILE, INFO_FILE, LEARNER_FILE

__all__ = ["RunLog", "read_jsonl", "read_run"]

logger = logging.getLogger(__name__)

_ACTOR_NAME = re.compile(r"^actor-(\d+)\.jsonl$")
_METRICS_NAME = re.compile(r"^metrics-(.+)\.jsonl$")


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Records of a JSON-lines file, and how many lines were skipped.

    A last line without its newline (its writer was killed in the middle of it) and
    lines that do not parse are skipped, not fatal.

    Returns:
        (records, skipped lines); ([], 0) when the file does not exist.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return [], 0
    with open(path, "rb") as file:
        data = file.read()
    lines = data.split(b"\n")
    skipped = 1 if lines[-1] else 0  # a torn last line
    records = []
    for line in lines[:-1]:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d torn or unreadable line(s)", path, skipped)
    return records, skipped


@dataclass(frozen=True)
class RunLog:
    """What a run directory holds.

    Attributes:
        directory: The run directory.
        actors: Actor index -> its episode records, in file order.
        learner: The learner's records.
        evaluations: Evaluation records.
        info: `run.json` (config, library version, start time), if present.
        skipped_lines: Lines skipped as torn or unreadable.
        metrics: Custom metric records (`log_metric`) of every process, in time order.
    """

    directory: str
    actors: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    learner: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] | None = None
    skipped_lines: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def metric_names(self) -> list[str]:
        """Names of the custom metrics, sorted."""
        return sorted({str(r.get("name")) for r in self.metrics})

    def metric(self, name: str) -> dict[str, list[dict[str, Any]]]:
        """Custom metric `name` (with or without its `custom/` prefix): process -> its
        records, in time order."""
        name = name.removeprefix("custom/")
        by_process: dict[str, list[dict[str, Any]]] = {}
        for record in self.metrics:
            if record.get("name") == name:
                by_process.setdefault(str(record.get("process")), []).append(record)
        return by_process

    @property
    def episodes(self) -> int:
        """Episode records over all actors."""
        return sum(len(records) for records in self.actors.values())

    def episodes_by_time(self) -> list[dict[str, Any]]:
        """Every actor's episodes in time order, each with `total_env_steps`: the sum
        over actors of their env steps at their latest episode end by then (an estimate
        of the run's env steps, short by at most one episode per actor)."""
        merged = sorted(
            (r for records in self.actors.values() for r in records),
            key=lambda r: (r.get("time", 0.0), r.get("actor", 0)),
        )
        latest: dict[int, int] = {}
        out = []
        for record in merged:
            latest[int(record.get("actor", 0))] = int(record.get("env_steps", 0))
            out.append({**record, "total_env_steps": sum(latest.values())})
        return out


def _current_names(record: dict[str, Any]) -> dict[str, Any]:
    """A learner record with today's field names (earlier versions wrote `mean_q`, in
    network units, for `mean_q_network`)."""
    if "mean_q" in record and "mean_q_network" not in record:
        record = {**record, "mean_q_network": record["mean_q"]}
        del record["mean_q"]
    return record


def read_run(directory: str | os.PathLike[str]) -> RunLog:
    """Loads a run directory written by `RunLogCallback`.

    Example:
        >>> from r2d2_agent.runlog import JsonLinesWriter
        >>> writer = JsonLinesWriter("run/metrics-learner.jsonl")
        >>> writer.write({"name": "replay_size", "value": 64, "process": "learner"})
        >>> writer.close()
        >>> [r["value"] for r in read_run("run").metric("replay_size")["learner"]]
        [64]

    Raises:
        FileNotFoundError: If `directory` does not exist.
        ValueError: If it holds no run log (no `actor-<i>.jsonl`, `learner.jsonl` or
            `eval.jsonl`).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"run directory {directory} does not exist")
    skipped = 0
    actors: dict[int, list[dict[str, Any]]] = {}
    metrics: list[dict[str, Any]] = []
    for name in sorted(os.listdir(directory)):
        match = _ACTOR_NAME.match(name)
        if match:
            records, bad = read_jsonl(os.path.join(directory, name))
            actors[int(match.group(1))] = records
            skipped += bad
        elif _METRICS_NAME.match(name):
            records, bad = read_jsonl(os.path.join(directory, name))
            metrics.extend(records)
            skipped += bad
    metrics.sort(key=lambda r: r.get("time", 0.0))
    learner, bad = read_jsonl(os.path.join(directory, LEARNER_FILE))
    learner = [_current_names(record) for record in learner]
    skipped += bad
    evaluations, bad = read_jsonl(os.path.join(directory, EVAL_FILE))
    skipped += bad
    info_path = os.path.join(directory, INFO_FILE)
    info = None
    if os.path.exists(info_path):
        with open(info_path, encoding="utf-8") as file:
            info = json.load(file)
    if not actors and not learner and not evaluations and not metrics:
        raise ValueError(
            f"{directory} holds no run log (actor-<i>.jsonl, learner.jsonl, eval.jsonl or "
            "metrics-<process>.jsonl); give the directory a RunLogCallback wrote to"
        )
    return RunLog(
        directory, dict(sorted(actors.items())), learner, evaluations, info, skipped, metrics
    )
