"""`RayOptions`: how the Ray backend places and paces the run's Ray actors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RayOptions"]

_SCHEDULING = ("SPREAD", "DEFAULT")


def _check_number(name: str, value: Any, minimum: float, *, strict: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (strict and value == minimum):
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class RayOptions:
    """Settings of the Ray backend (`R2D2Manager(..., backend="ray", ray_options=...)`).

    Raises:
        ValueError: On an invalid value; the message names the option and the value.
    """

    learner_num_cpus: float = 1.0
    """CPUs the learner actor reserves in the cluster's scheduler."""
    learner_num_gpus: float = 0.0
    """GPUs the learner actor asks for (Ray sets its `CUDA_VISIBLE_DEVICES`); 0: none."""
    learner_on_driver_node: bool = True
    """Place the learner on the driver's node when that node has the CPUs and GPUs it
    asks for (its checkpoints and logs are then written where you run the manager);
    False, or a node without them, lets Ray place it anywhere."""
    actor_num_cpus: float = 1.0
    """CPUs each actor reserves; 0.5 packs two actors per CPU."""
    actor_resources: Mapping[str, float] | None = None
    """Custom Ray resources each actor asks for, e.g. `{"actor_node": 1}` to keep actors on
    nodes started with `ray start --resources='{"actor_node": 8}'`; None: none."""
    actor_scheduling: str = "SPREAD"
    """Ray scheduling strategy of the actors: "SPREAD" (over the nodes) or "DEFAULT"."""
    inbox_size: int = 64
    """Experience batches (`send_batch_size` sequences each) the learner holds before a
    sending actor waits: the back-pressure bound (the inbox counts sequences, so a call
    carrying several batches counts as several)."""
    send_ahead: int = 16
    """Batches (`send_batch_size` sequences each) an actor gathers while its previous
    `put_experience` call is in flight, all sent in its next call; with as many gathered,
    it waits for that call. 1: every send waits for the previous call. An actor is then at
    most about `2 * send_ahead` batches ahead of what the learner's inbox took."""
    send_interval: float = 0.05
    """Seconds between two `put_experience` calls of an actor while it has gathered fewer
    than `send_ahead` batches (its batches wait for the next call meanwhile): fewer,
    larger calls (each Ray call costs the actor about a millisecond on a busy machine);
    0: a call per batch once the previous call is done."""
    report_interval: float = 0.2
    """Seconds between a process's reports to the run's board (counters, stop flag,
    episode returns; the signs of life the stall watchdog reads): the delay before a
    process sees a stop (Ctrl-C, a time limit, a learner's `nb_trains`) and the grain of
    the progress output (the driver reads the board once per interval, at most ten times
    a second). Actors learn of new weights from their reports' replies, so the learner
    publishes at most once per interval too. It does not bound the overshoot of
    `nb_steps`: the board leases the budget out (an actor steps only below its lease,
    asking each report for about three intervals' worth), so a run passes `nb_steps` by
    less than one actor step per actor whatever the interval. 0.5 or more at hundreds of
    actors (one board serves them all)."""
    start_timeout: float = 300.0
    """Seconds a Ray actor may take to be placed and started (e.g. waiting for a node
    with free CPUs) before the run stops with an error instead of waiting forever."""
    runtime_env: Mapping[str, Any] | None = None
    """Ray runtime environment of the run's actors (e.g. `{"pip": [...]}` or
    `{"working_dir": "."}` when the nodes lack your code); None: the nodes' own."""
    init_num_cpus: int | None = None
    """CPUs of a local Ray instance the manager starts itself (no `ray_address` and Ray
    not running); None: enough for the learner and every actor, at least the machine's."""

    def __post_init__(self) -> None:
        _check_number("learner_num_cpus", self.learner_num_cpus, 0.0, strict=False)
        _check_number("learner_num_gpus", self.learner_num_gpus, 0.0, strict=False)
        if not isinstance(self.learner_on_driver_node, bool):
            raise ValueError(
                f"learner_on_driver_node must be True or False, got {self.learner_on_driver_node!r}"
            )
        _check_number("actor_num_cpus", self.actor_num_cpus, 0.0, strict=False)
        if self.actor_scheduling not in _SCHEDULING:
            raise ValueError(
                f"actor_scheduling must be one of {_SCHEDULING}, got {self.actor_scheduling!r}"
            )
        if isinstance(self.inbox_size, bool) or not isinstance(self.inbox_size, int):
            raise ValueError(f"inbox_size must be an int >= 1, got {self.inbox_size!r}")
        if self.inbox_size < 1:
            raise ValueError(f"inbox_size must be an int >= 1, got {self.inbox_size!r}")
        if (
            isinstance(self.send_ahead, bool)
            or not isinstance(self.send_ahead, int)
            or self.send_ahead < 1
        ):
            raise ValueError(f"send_ahead must be an int >= 1, got {self.send_ahead!r}")
        _check_number("send_interval", self.send_interval, 0.0, strict=False)
        _check_number("report_interval", self.report_interval, 0.0, strict=True)
        _check_number("start_timeout", self.start_timeout, 0.0, strict=True)
        if self.actor_resources is not None:
            if not isinstance(self.actor_resources, Mapping):
                raise ValueError(
                    f"actor_resources must be a mapping or None, got {self.actor_resources!r}"
                )
            for name, amount in self.actor_resources.items():
                _check_number(f"actor_resources[{name!r}]", amount, 0.0, strict=True)
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            raise ValueError(f"runtime_env must be a mapping or None, got {self.runtime_env!r}")
        if self.init_num_cpus is not None and (
            isinstance(self.init_num_cpus, bool)
            or not isinstance(self.init_num_cpus, int)
            or self.init_num_cpus < 1
        ):
            raise ValueError(
                f"init_num_cpus must be an int >= 1 or None, got {self.init_num_cpus!r}"
            )

    def cpus_needed(self, nb_actors: int) -> float:
        """CPUs the learner and `nb_actors` actors reserve together."""
        return self.learner_num_cpus + nb_actors * self.actor_num_cpus

    def resources_needed(self, nb_actors: int) -> dict[str, float]:
        """Every Ray resource the run reserves (CPU, GPU, the actors' custom ones)."""
        needed = {"CPU": self.cpus_needed(nb_actors), "GPU": self.learner_num_gpus}
        for name, amount in (self.actor_resources or {}).items():
            needed[name] = needed.get(name, 0.0) + nb_actors * amount
        return needed
