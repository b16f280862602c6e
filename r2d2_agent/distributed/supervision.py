"""What every backend's supervisor shares for one `R2D2Manager.train` call.

`RunBook`: the limits and why the run stopped, stop requests, the episodes' returns per
actor, actor restarts and summaries, and the `Progress` and `TrainResult` built from a
backend's counters. `BackendSupervisor`: the run loop around a backend (start, poll and
report until a limit, Ctrl-C, SIGTERM and SIGHUP, always close) and the interface the
manager uses. The backends differ in how they start, watch and stop processes, not in
this.

Stop signals: while `run` runs (in the main thread only, where Python delivers signals),
SIGTERM and SIGHUP (what `docker stop`, systemd, Kubernetes and Slurm send before SIGKILL,
and a closed terminal) are a stop request like a limit: every child stops, the learner
writes its final checkpoint (`save_at_end`), the run cleans up and returns with
`stop_reason` "sigterm" or "sighup". The handlers found before `run` are restored when it
returns. Ctrl-C (SIGINT) keeps Python's `KeyboardInterrupt` (stop_reason "interrupted").
"""

from __future__ import annotations

import abc
import collections
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import TrainingState
from r2d2_agent.distributed.reports import Progress, ProgressBar, TrainResult
from r2d2_agent.distributed.spec import RunSpec, TrainLimits
from r2d2_agent.math import resumed_seed

__all__ = ["BackendSupervisor", "RunBook"]

logger = logging.getLogger(__name__)

_RECENT_EPISODES = 20

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals `BackendSupervisor.run` turns into a graceful stop (stop_reason: the signal's
name in lower case)."""


@contextlib.contextmanager
def stop_signals(on_signal: Callable[[signal.Signals], None]) -> Iterator[Callable[[], None]]:
    """Meanwhile, `STOP_SIGNALS` call `on_signal(sig)` instead of their handlers; the
    handlers found on entry come back on exit. Outside the main thread (where Python
    cannot install handlers) it does nothing.

    Args:
        on_signal: Called (in the main thread, between two bytecodes) with the signal.

    Yields:
        A function that installs the handlers again (after code that may have replaced
        them, as `ray.init` does).
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: object) -> None:
        on_signal(signal.Signals(signum))

    def install() -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, handler)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        install()
        yield install
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


class RunBook:
    """The bookkeeping of one training session of `spec`.

    Args:
        spec: The run.
        limits: When to stop.
    """

    def __init__(self, spec: RunSpec, limits: TrainLimits) -> None:
        n = spec.nb_actors
        self.spec = spec
        self.limits = limits
        self.t0 = time.monotonic()
        self.returns: list[list[float]] = [[] for _ in range(n)]
        """Per actor index, the returns of its episodes finished in this call."""
        self.recent: collections.deque[float] = collections.deque(maxlen=_RECENT_EPISODES)
        self.restarts = [0] * n
        """Per actor index, how many times it was restarted."""
        self.actor_info: list[dict[str, Any]] = [{} for _ in range(n)]
        """Per actor index, what its last process reported at exit."""
        self.learner_info: dict[str, Any] = {}
        """What the learner reported at exit."""
        self.reason = ""
        """Why the run stopped ("" while it runs)."""
        self.stop_requested = False
        self.requested_reason = "requested"
        self.stop_detail = ""

    @property
    def elapsed_seconds(self) -> float:
        """Seconds since the call started."""
        return time.monotonic() - self.t0

    def request_stop(self, reason: str = "requested", detail: str = "") -> None:
        """Asks the run to stop at the next `limit_reached` (the first request wins).

        Args:
            reason: The stop reason: "requested" (`R2D2Manager.request_stop`),
                "callback" (`R2D2Callback.request_stop`), "sigterm" or "sighup".
            detail: Who asked and why (`TrainResult.stop_detail`).
        """
        if not self.stop_requested:
            self.stop_requested = True
            self.requested_reason = reason
            self.stop_detail = detail
            if detail:
                logger.info("stop requested by %s", detail)

    def record_episode(self, index: int, episode_return: float) -> None:
        """Keeps the return of an episode actor `index` finished."""
        self.returns[index].append(float(episode_return))
        self.recent.append(float(episode_return))

    def may_restart(self, index: int) -> bool:
        """Whether actor `index` may be restarted once more (`max_actor_restarts`)."""
        return self.restarts[index] < self.spec.options.max_actor_restarts

    def restart_refusal(self, index: int) -> str:
        """Why actor `index` is not restarted again (the message of the error raised)."""
        return (
            f"actor {index} died and was already restarted {self.restarts[index]} time(s) "
            f"(max_actor_restarts={self.spec.options.max_actor_restarts}); stopping the run"
        )

    def trains_done(self, updates: int) -> bool:
        """Whether the learner reached `nb_trains`."""
        nb_trains = self.limits.nb_trains
        return nb_trains is not None and updates >= nb_trains

    def limit_reached(self, env_steps: int, updates: int) -> bool:
        """Whether a stop was requested or a limit reached; sets `reason` if so."""
        limits = self.limits
        if self.reason:
            return True
        if self.stop_requested:
            self.reason = self.requested_reason
        elif limits.nb_steps is not None and env_steps >= limits.nb_steps:
            self.reason = "nb_steps"
        elif self.trains_done(updates):
            self.reason = "nb_trains"
        elif limits.max_seconds is not None and self.elapsed_seconds >= limits.max_seconds:
            self.reason = "max_seconds"
        return bool(self.reason)

    def progress(
        self,
        *,
        env_steps: int,
        actor_env_steps: tuple[int, ...],
        learner_updates: int,
        sequences_received: int,
        weights_version: int,
        loss: float,
        episodes: int,
        actor_pids: tuple[int | None, ...],
        learner_pid: int | None,
    ) -> Progress:
        """A `Progress` from the backend's counters and this book."""
        return Progress(
            elapsed_seconds=self.elapsed_seconds,
            env_steps=env_steps,
            actor_env_steps=actor_env_steps,
            learner_updates=learner_updates,
            sequences_received=sequences_received,
            weights_version=weights_version,
            loss=loss,
            episodes=episodes,
            recent_mean_return=float(np.mean(self.recent)) if self.recent else None,
            actor_pids=actor_pids,
            learner_pid=learner_pid,
            actor_restarts=tuple(self.restarts),
        )

    def result(
        self,
        *,
        env_steps: int,
        learner_updates: int,
        sequences_received: int,
        weights_version: int,
        actor_env_steps: list[int],
        episodes: int,
        resumed_from: str | None,
    ) -> TrainResult:
        """The `TrainResult` from the backend's final counters and this book."""
        return TrainResult(
            env_steps=env_steps,
            learner_updates=learner_updates,
            sequences_received=sequences_received,
            weights_version=weights_version,
            elapsed_seconds=self.elapsed_seconds,
            stop_reason=self.reason,
            actor_env_steps=actor_env_steps,
            episode_returns=self.returns,
            actor_restarts=list(self.restarts),
            actor_info=self.actor_info,
            learner_info=self.learner_info,
            episodes=episodes,
            stop_detail=self.stop_detail,
            resumed_from=resumed_from,
        )


class BackendSupervisor(abc.ABC):
    """One training session of `spec` on a backend (see `R2D2Manager.train`).

    A backend implements `_start`, `_poll`, `_counts`, `snapshot`, `read_weights` and
    `close`; the loop, the stop requests and the result are the same for all.

    Args:
        spec: The run.
        limits: When to stop.
        initial_weights: Weights the learner starts from, as it publishes them (None:
            fresh ones).
        on_progress: Called in the parent about ten times a second with a `Progress`.
        resume: A checkpoint's state to continue from: the counters start from its
            counts (per actor, see `TrainingCounters.env_steps_per_actor`) and the
            learner gets it in its `LearnerStart`.
    """

    def __init__(
        self,
        spec: RunSpec,
        limits: TrainLimits,
        *,
        initial_weights: list[np.ndarray] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        resume: TrainingState | None = None,
    ) -> None:
        self.spec = spec
        self.limits = limits
        self.on_progress = on_progress
        self.resume = resume
        self.book = RunBook(spec, limits)
        self._initial_weights = initial_weights
        self.final_weights: list[np.ndarray] | None = None
        """The learner's latest weights, kept by `close`."""
        self.version = 0
        """The version of the latest weights read."""
        self.stopping = False
        """Whether `close` began."""

    @property
    def resumed_at(self) -> int:
        """Env steps of the checkpoint this session resumes (0: a fresh run)."""
        return 0 if self.resume is None else int(self.resume.counters.env_steps)

    @property
    def learner_seed(self) -> int | None:
        """Seed of the learner process: the config's, moved on in a resumed run
        (`resumed_seed`)."""
        return resumed_seed(self.spec.config.seed, self.resumed_at)

    def actor_seed(self, index: int, restarts: int) -> int | None:
        """Seed of actor `index` after `restarts` restarts in this session
        (`RunSpec.actor_seed`; a resumed run does not replay the run's first episodes)."""
        return self.spec.actor_seed(index, restarts, self.resumed_at)

    def run(self) -> TrainResult:
        """Runs to the first limit; always cleans up; returns a `TrainResult`.

        SIGTERM and SIGHUP stop the run as a limit does (see the module docstring);
        Ctrl-C too, with stop_reason "interrupted".
        """
        bar = ProgressBar(self.limits.nb_steps, self.spec.options.progress)
        with stop_signals(self._on_stop_signal) as install_again:
            try:
                self._prepare()
                install_again()  # `_prepare` may have installed handlers of its own
                self._start()
                while not self._limit_reached():
                    self._poll()
                    progress = self.snapshot()
                    bar.update(progress)
                    if self.on_progress is not None:
                        self.on_progress(progress)
            except KeyboardInterrupt:
                self.book.reason = "interrupted"
                logger.warning("interrupted: stopping the actors and the learner")
            finally:
                bar.close()
                self.close()  # under the run's handlers: a second SIGTERM cannot cut it
        counts = self._counts()
        return self.book.result(
            env_steps=sum(counts["actor_env_steps"]),
            weights_version=self.version,
            resumed_from=None if self.resume is None else self.resume.path,
            **counts,
        )

    def request_stop(self, reason: str = "requested", detail: str = "") -> None:
        """Asks the run to stop at its next poll (see `RunBook.request_stop`)."""
        self.book.request_stop(reason, detail)

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        """A stop signal reached the parent: stop as at a limit (the first one counts)."""
        if self.stopping or self.book.stop_requested:
            logger.warning("%s received; the run is already stopping", sig.name)
            return
        logger.warning(
            "%s received: stopping the actors and the learner (final checkpoint, then exit)",
            sig.name,
        )
        self.book.request_stop(sig.name.lower(), f"{sig.name} received")

    def _limit_reached(self) -> bool:
        counts = self._counts()
        return self.book.limit_reached(sum(counts["actor_env_steps"]), counts["learner_updates"])

    def _prepare(self) -> None:  # noqa: B027 - optional hook
        """Runs before the stop signals' handlers are installed (e.g. connecting to a
        cluster, which may install handlers of its own that the run's must replace)."""

    @abc.abstractmethod
    def _start(self) -> None:
        """Starts the learner and the actors (may poll while it waits for the learner)."""

    @abc.abstractmethod
    def _poll(self) -> None:
        """Waits up to one poll (0.1 s) for events, then handles them (raising
        `R2D2ProcessError` for a failure that ends the run)."""

    @abc.abstractmethod
    def _counts(self) -> dict[str, Any]:
        """The run's counters as `TrainResult` fields: `actor_env_steps` (a list),
        `learner_updates`, `sequences_received`, `episodes`."""

    @abc.abstractmethod
    def snapshot(self) -> Progress:
        """The current `Progress`."""

    @abc.abstractmethod
    def read_weights(self) -> list[np.ndarray] | None:
        """A copy of the latest published weights (None before the first)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops every process of the run and releases its resources (idempotent); keeps
        the final weights in `final_weights`."""
