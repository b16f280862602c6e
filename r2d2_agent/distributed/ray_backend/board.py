"""`RunBoard`: the coordinator of one Ray run, and the messages it exchanges.

One board per `train` call runs as a small Ray actor (no CPU reserved) beside the driver.
Every process reports to it every `RayOptions.report_interval` seconds and reads the stop
flag in the reply (the reports, and heartbeats during declared long operations, are the
signs of life the driver's stall watchdog reads); the learner registers each weights
publish there (its version and the object-store reference, never the arrays); the driver
reads a `BoardSnapshot` once per report interval. It is a plain class, so it is tested
without Ray.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from r2d2_agent.checkpoints import TrainingCounters

__all__ = [
    "ActorReport",
    "ActorReply",
    "BoardSnapshot",
    "LearnerReport",
    "PublishedWeights",
    "RunBoard",
]


@dataclass(frozen=True)
class ActorReport:
    """Actor -> board: its counts so far and the returns of episodes since its last report.

    Attributes:
        index: The actor's index.
        steps: Env steps this actor index took (over restarts and resumed runs).
        episodes: Episodes it finished (likewise).
        returns: Returns of the episodes finished since its previous report, in order.
        weights_version: The latest weights version the actor knows of (the reply
            carries the weights reference only if a newer one was published).
        wanted: Env steps the actor asks to hold ahead of `steps` (its lease of the
            run's `nb_steps`; ignored in a run without one).
    """

    index: int
    steps: int
    episodes: int
    returns: tuple[float, ...] = ()
    weights_version: int = 0
    wanted: int = 0


@dataclass(frozen=True)
class PublishedWeights:
    """The latest published weights: their version and a one-element list holding the
    object-store reference (a list, so Ray hands the reference over rather than the
    arrays)."""

    version: int
    refs: list[Any]


@dataclass(frozen=True)
class ActorReply:
    """Board -> actor: whether to stop, the env steps of all actors together, the latest
    published weights if newer than the report's `weights_version` (their reference: an
    actor fetches them only if newer), else None, and the actor's lease: the env-step
    count it may step up to (None in a run without `nb_steps`)."""

    stop: bool
    total_steps: int
    weights: PublishedWeights | None = None
    lease: int | None = None


@dataclass(frozen=True)
class LearnerReport:
    """Learner -> board: its counters after its latest iteration."""

    updates: int
    sequences: int
    env_steps: int
    version: int
    loss: float


@dataclass(frozen=True)
class BoardSnapshot:
    """Board -> driver: the run's counters, and what happened since the last snapshot.

    Attributes:
        actor_steps: Env steps per actor index.
        actor_episodes: Episodes per actor index.
        learner: The learner's latest report.
        returns: (actor index, episode return) of episodes finished since the last
            snapshot, in arrival order.
        stop_requests: Who asked to stop and why (`R2D2Callback.request_stop`), since the
            last snapshot.
        silent_for: (worker, seconds since its last sign of life: a report or a
            keep-alive heartbeat) for every worker ("learner", "actor <i>") seen so far.
        busy: The workers inside a declared long operation.
    """

    actor_steps: tuple[int, ...]
    actor_episodes: tuple[int, ...]
    learner: LearnerReport
    returns: tuple[tuple[int, float], ...]
    stop_requests: tuple[str, ...]
    silent_for: tuple[tuple[str, float], ...] = ()
    busy: tuple[str, ...] = ()


class RunBoard:
    """The run's shared state: stop flag, counters, latest weights, pending events, and
    the leases of the env-step budget.

    With `nb_steps`, the budget is handed out in leases: actor i may step while its env
    steps are below its lease, and the board never leases more than the budget holds
    (each actor's lease or its steps, whichever is larger, summed). So a run's env steps
    reach `nb_steps` and pass it by less than one actor step (`envs_per_actor` env
    steps) per actor, however late the reports are.

    Args:
        actor_steps: Env steps per actor index to start from (a resumed run's).
        actor_episodes: Episodes per actor index to start from.
        updates: Learner updates to start from.
        sequences: Sequences received to start from.
        nb_steps: The run's env-step budget (over all actors, a resumed run's steps
            included), or None for none.
    """

    def __init__(
        self,
        actor_steps: tuple[int, ...],
        actor_episodes: tuple[int, ...],
        updates: int = 0,
        sequences: int = 0,
        nb_steps: int | None = None,
    ) -> None:
        if len(actor_steps) != len(actor_episodes):
            raise ValueError("actor_steps and actor_episodes must have one entry per actor")
        self._nb_steps = nb_steps
        self._steps = [int(s) for s in actor_steps]
        self._leases = list(self._steps)  # the env-step count each actor may step up to
        self._episodes = [int(e) for e in actor_episodes]
        self._learner = LearnerReport(int(updates), int(sequences), 0, 0, math.nan)
        self._returns: list[tuple[int, float]] = []
        self._stop_requests: list[str] = []
        self._weights: PublishedWeights | None = None
        self._stop = False
        self._signs: dict[str, float] = {}  # worker -> time.monotonic() of its last sign
        self._busy: set[str] = set()

    # Actors ----------------------------------------------------------------------------

    def actor_counts(self, index: int) -> tuple[int, int]:
        """(env steps, episodes) of actor `index` so far: where a (re)started actor goes on."""
        return self._steps[index], self._episodes[index]

    def actor_report(self, report: ActorReport) -> ActorReply:
        """Records an actor's report; replies with the stop flag, the total env steps and
        the latest weights if newer than the actor knows."""
        i = report.index
        self._signs[f"actor {i}"] = time.monotonic()
        self._steps[i] = max(self._steps[i], int(report.steps))
        self._episodes[i] = max(self._episodes[i], int(report.episodes))
        self._returns.extend((i, float(r)) for r in report.returns)
        return ActorReply(
            self._stop,
            sum(self._steps),
            self.weights_if_newer(report.weights_version),
            self._lease(i, int(report.wanted)),
        )

    def _lease(self, index: int, wanted: int) -> int | None:
        """Extends actor `index`'s lease towards `wanted` env steps past its steps, as far
        as the budget's unleased steps go; its lease (None without a budget).

        A lease never shrinks: the actor may be stepping on it while the reply travels."""
        if self._nb_steps is None:
            return None
        held = [max(s, lease) for s, lease in zip(self._steps, self._leases, strict=True)]
        free = self._nb_steps - sum(held)
        extra = min(self._steps[index] + wanted - held[index], free)
        self._leases[index] = held[index] + max(0, extra)
        return self._leases[index]

    # Learner ---------------------------------------------------------------------------

    def learner_report(self, report: LearnerReport) -> bool:
        """Records the learner's counters; returns the stop flag."""
        self._signs["learner"] = time.monotonic()
        self._learner = report
        return self._stop

    def publish(self, weights: PublishedWeights) -> None:
        """Makes `weights` the latest (an older version never replaces a newer one)."""
        if self._weights is None or weights.version > self._weights.version:
            self._weights = weights

    def weights_if_newer(self, version: int) -> PublishedWeights | None:
        """The latest weights if newer than `version`, else None."""
        if self._weights is None or self._weights.version <= version:
            return None
        return self._weights

    def run_counters(self) -> TrainingCounters:
        """The run's env steps and episodes, for the learner's checkpoints."""
        return TrainingCounters(
            env_steps=sum(self._steps),
            episodes=sum(self._episodes),
            actor_env_steps=tuple(self._steps),
            actor_episodes=tuple(self._episodes),
        )

    # Anyone ----------------------------------------------------------------------------

    def heartbeat(self, who: str) -> None:
        """A sign of life of worker `who` ("learner", "actor <i>") besides its reports:
        its keep-alive thread during a long operation."""
        self._signs[who] = time.monotonic()

    def set_busy(self, who: str, busy: bool) -> None:
        """Worker `who` enters (True) or leaves (False) a declared long operation."""
        self._signs[who] = time.monotonic()
        if busy:
            self._busy.add(who)
        else:
            self._busy.discard(who)

    def request_stop(self, detail: str) -> None:
        """A callback asked to end the run (`R2D2Callback.request_stop` in a child)."""
        self._stop_requests.append(detail)

    def set_stop(self) -> None:
        """Raises the stop flag: every process stops at its next report."""
        self._stop = True

    def stopped(self) -> bool:
        """Whether the stop flag is raised."""
        return self._stop

    def snapshot(self) -> BoardSnapshot:
        """The counters, the workers' silences, and the returns and stop requests since
        the last snapshot."""
        now = time.monotonic()
        snap = BoardSnapshot(
            actor_steps=tuple(self._steps),
            actor_episodes=tuple(self._episodes),
            learner=self._learner,
            returns=tuple(self._returns),
            stop_requests=tuple(self._stop_requests),
            silent_for=tuple((who, now - t) for who, t in self._signs.items()),
            busy=tuple(sorted(self._busy)),
        )
        self._returns.clear()
        self._stop_requests.clear()
        return snap
