"""What one `R2D2Manager.train` call reports: `Progress` while it runs, then a `TrainResult`.

`ProgressBar` shows the `Progress` snapshots on a tqdm bar (env steps, learner updates,
env steps per second, recent mean return).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Progress", "ProgressBar", "TrainResult"]

import numpy as np
from tqdm import tqdm


@dataclass(frozen=True)
class Progress:
    """A snapshot of a running `R2D2Manager.train`, handed to its `on_progress` hook."""

    elapsed_seconds: float
    env_steps: int
    actor_env_steps: tuple[int, ...]
    learner_updates: int
    sequences_received: int
    weights_version: int
    loss: float
    episodes: int
    """Finished episodes over all actors (with `resume_from`, the checkpoint's included)."""
    recent_mean_return: float | None
    """Mean return of the last 20 episodes over all actors (None before the first)."""
    actor_pids: tuple[int | None, ...]
    learner_pid: int | None
    actor_restarts: tuple[int, ...]


@dataclass(frozen=True)
class TrainResult:
    """What one `R2D2Manager.train` did. Counters are Python ints."""

    env_steps: int
    """Env steps over all actors (may pass `nb_steps` by at most actor_num - 1); with
    `resume_from`, the checkpoint's steps included."""
    learner_updates: int
    """Learner updates (with `resume_from`, the checkpoint's included)."""
    sequences_received: int
    weights_version: int
    elapsed_seconds: float
    stop_reason: str
    """"nb_steps", "nb_trains", "max_seconds", "requested" (`R2D2Manager.request_stop`),
    "callback" (`R2D2Callback.request_stop`, see `stop_detail`), "interrupted" (Ctrl-C),
    "sigterm" or "sighup" (the signal reached the parent: a scheduler's stop, a closed
    terminal)."""
    actor_env_steps: list[int]
    episode_returns: list[list[float]]
    """Per actor index, the returns of the episodes it finished in this call, in order."""
    actor_restarts: list[int]
    actor_info: list[dict[str, Any]] = field(default_factory=list)
    """Per actor, what its last process reported at exit (`ActorSummary` as a dict: pid,
    policy, tensorflow_loaded, steps, weight_pulls, items_sent, and `seconds`: where its
    time went); on Ray also `node_id` and `hostname`."""
    learner_info: dict[str, Any] = field(default_factory=dict)
    """What the learner reported at exit (`LearnerSummary` as a dict: pid, updates,
    sequences, and `seconds`: where its time went); empty if it did not stop normally."""
    episodes: int = 0
    """Finished episodes over all actors (with `resume_from`, the checkpoint's included)."""
    stop_detail: str = ""
    """Who asked to stop and why, e.g. "actor 1: mean return 480.0 >= 475"."""
    resumed_from: str | None = None
    """The checkpoint file the run continued from (None: a fresh start)."""

    @property
    def interrupted(self) -> bool:
        """Whether the run was stopped from outside: Ctrl-C, SIGTERM or SIGHUP."""
        return self.stop_reason in ("interrupted", "sigterm", "sighup")

    def recent_mean_return(self, episodes: int = 20) -> float | None:
        """Mean return of each actor's last `episodes` episodes, pooled (None if none)."""
        recent = [r for returns in self.episode_returns for r in returns[-episodes:]]
        return float(np.mean(recent)) if recent else None


class ProgressBar:
    """A tqdm bar over env steps.

    Args:
        total: Env steps to reach (None: no total).
        enabled: Show the bar when stderr is a terminal; False: never.
    """

    def __init__(self, total: int | None, enabled: bool) -> None:
        self._bar = tqdm(
            total=total,
            unit="step",
            disable=None if enabled else True,
            dynamic_ncols=True,
            desc="R2D2",
        )

    def update(self, progress: Progress) -> None:
        """Moves the bar to `progress` (does nothing when the bar is disabled)."""
        bar = self._bar
        if bar.disable:
            return
        bar.update(progress.env_steps - bar.n)
        ret = progress.recent_mean_return
        bar.set_postfix(
            updates=progress.learner_updates,
            sps=f"{progress.env_steps / max(progress.elapsed_seconds, 1e-9):.0f}",
            ret="-" if ret is None else f"{ret:.1f}",
            refresh=False,
        )

    def close(self) -> None:
        """Closes the bar."""
        self._bar.close()
