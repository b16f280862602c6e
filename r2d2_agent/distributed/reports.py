"""What one `R2D2Manager.train` call reports: `Progress` while it runs, then a
`TrainResult`, or an `R2D2ProcessError` when a child failed.

`ProgressBar` shows the `Progress` snapshots on a tqdm bar (env steps, learner updates,
env steps per second, recent mean return). `TimeSplit` measures where an actor's or the
learner's loop spends its wall time (the `seconds` of their summaries): the runners time
the few places where they wait or hand work to another process (sending, receiving,
pulling and publishing weights) and their main work (learning); `shares()` puts the rest
under the loop's remaining activity (acting, for an actor). Each measure is two
`time.perf_counter` calls, so the cost stays far below a learner update, and an actor
measures only per send and per weights pull, never per step.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

__all__ = [
    "MAIN_GUARD_HINT",
    "Progress",
    "ProgressBar",
    "R2D2ProcessError",
    "TimeSplit",
    "TrainResult",
    "describe_exit",
]

MAIN_GUARD_HINT = (
    "spawned processes import your main module, so the code that starts training must run "
    'under `if __name__ == "__main__":`; add that guard to your script'
)
"""What to do when a child failed while importing the main module."""


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


class R2D2ProcessError(RuntimeError):
    """A child process of an `R2D2Manager` failed; the message holds its traceback.

    Attributes:
        role: "learner" or "actor".
        index: The actor index (None for the learner).
        exitcode: The child's exit code (negative: killed by that signal), if known.
        child_traceback: The traceback text sent by the child, if it could send one.
    """

    def __init__(
        self,
        message: str,
        role: str,
        index: int | None = None,
        exitcode: int | None = None,
        child_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.role = role
        self.index = index
        self.exitcode = exitcode
        self.child_traceback = child_traceback


def describe_exit(exitcode: int | None) -> str:
    """Human-readable exit status ("exit code 1", "killed by SIGKILL")."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class TimeSplit:
    """Accumulates wall seconds per activity between `start` and `stop`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        """Seconds measured per activity."""
        self._started: float | None = None
        self._elapsed = 0.0

    def start(self) -> None:
        """Starts the clock of the whole loop."""
        self._started = time.perf_counter()

    def stop(self) -> None:
        """Stops it (`elapsed` then stays fixed)."""
        if self._started is not None:
            self._elapsed = time.perf_counter() - self._started
            self._started = None

    @property
    def elapsed(self) -> float:
        """Seconds between `start` and `stop` (or now, while running)."""
        if self._started is not None:
            return time.perf_counter() - self._started
        return self._elapsed

    @contextlib.contextmanager
    def measure(self, activity: str) -> Iterator[None]:
        """Adds the wall time of the `with` block to `activity`."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.add(activity, time.perf_counter() - begin)

    def add(self, activity: str, seconds: float) -> None:
        """Adds `seconds` to `activity`."""
        self.seconds[activity] = self.seconds.get(activity, 0.0) + seconds

    def shares(self, rest: str) -> dict[str, float]:
        """Seconds per activity, the unmeasured remainder under `rest`, and `total`.

        Args:
            rest: The name of the remainder (e.g. "acting").

        Returns:
            Rounded seconds (ms precision) per activity, `rest` and `total`.
        """
        total = self.elapsed
        out = {name: round(value, 3) for name, value in sorted(self.seconds.items())}
        out[rest] = round(max(total - sum(self.seconds.values()), 0.0), 3)
        out["total"] = round(total, 3)
        return out
