"""The Ray actors of a run: `ActorWorker` and `LearnerWorker`, and how they report.

Each worker prepares its process in its constructor (`prepare_process`: GPU hiding or
memory growth before any TensorFlow import, logging, seeds), then `run` builds its role
from the typed start arguments (`ActorStart`, `LearnerStart`, carried `Deferred`) with
`wiring`, exactly as the multiprocessing backend does, over the Ray channels. Reports to
the run's board go every `RayOptions.report_interval` seconds; the reply carries the stop
flag.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from r2d2_agent.distributed.learner_runner import LearnerRunner
from r2d2_agent.distributed.messages import (
    ActorSummary,
    Experience,
    KeepAliveLiveness,
    LearnerSummary,
)
from r2d2_agent.distributed.process_setup import ChildSetup, Deferred, prepare_process
from r2d2_agent.distributed.ray_backend.board import (
    ActorReport,
    LearnerReport,
    PublishedWeights,
)
from r2d2_agent.distributed.ray_backend.channels import (
    ActorCallSender,
    Inbox,
    InboxReceiver,
    ObjectStorePublisher,
    ObjectStoreSubscriber,
)
from r2d2_agent.distributed.spec import ActorStart, LearnerStart
from r2d2_agent.distributed.wiring import (
    actor_summary,
    build_learner,
    learner_summary,
    make_actor_envs,
    make_actor_runner,
    make_learner_runner,
)
from r2d2_agent.roles.hooks import bind_stop_requester

__all__ = ["ActorWorker", "LearnerOutcome", "LearnerWorker", "WorkerPlace"]


@dataclass(frozen=True)
class WorkerPlace:
    """Where a worker runs: its Ray node id, host name and process id."""

    node_id: str
    hostname: str
    pid: int


@dataclass(frozen=True)
class LearnerOutcome:
    """What the learner's `run` returns when it stops normally."""

    summary: LearnerSummary
    weights: list[np.ndarray]


def _place() -> WorkerPlace:
    return WorkerPlace(ray.get_runtime_context().get_node_id(), os.uname().nodename, os.getpid())


def _stop_requester(board: Any, who: str):
    """What `R2D2Callback.request_stop` calls in a worker: a request on the board."""

    def request(reason: str) -> None:
        board.request_stop.remote(f"{who}: {reason}")

    return request


class _BoardPulse(KeepAliveLiveness):
    """A worker's `Liveness` for the driver's stall watchdog: its reports to the board are
    its beats; during a declared long operation a keep-alive thread sends heartbeats."""

    def __init__(self, board: Any, who: str, interval: float = 1.0) -> None:
        super().__init__(interval)
        self._board = board
        self._who = who

    def beat(self) -> None:
        """Nothing: the loop's reports to the board, every `report_interval`, are its
        signs of life (a call per env step would cost more than the step)."""

    def keep_alive(self) -> None:
        self._board.heartbeat.remote(self._who)

    def set_busy(self, busy: bool) -> None:
        self._board.set_busy.remote(self._who, busy)


class _ActorBoardReporter:
    """`ActorProgress` reporting to the board; also the actor's stop condition.

    It reports every `interval` seconds, and at every step once the run's env steps may
    have reached `nb_steps` (so the budget is overshot by about one step per actor).
    """

    def __init__(
        self,
        board: Any,
        index: int,
        steps: int,
        episodes: int,
        *,
        nb_steps: int | None,
        nb_actors: int,
        interval: float,
    ) -> None:
        self._board = board
        self._index = index
        self._steps = steps
        self._episodes = episodes
        self._returns: list[float] = []
        self._nb_steps = nb_steps
        self._nb_actors = nb_actors
        self._interval = interval
        self._next_report = 0.0
        self._steps_at_report = steps
        self._total = 0
        self._stop = False
        self._weights: PublishedWeights | None = None

    def on_steps(self, total_steps: int) -> None:
        self._steps = total_steps

    def run_env_steps(self) -> int:
        """The run's env steps as of the last report, plus this actor's since then."""
        return self._total + self._steps - self._steps_at_report

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        self._episodes += 1
        self._returns.append(float(episode_return))

    def report(self) -> None:
        """Sends the counts and returns so far; reads the stop flag and the total."""
        report = ActorReport(self._index, self._steps, self._episodes, tuple(self._returns))
        reply = ray.get(self._board.actor_report.remote(report))
        self._returns.clear()
        self._stop = self._stop or reply.stop
        self._total = reply.total_steps
        self._weights = reply.weights
        self._steps_at_report = self._steps
        self._next_report = time.monotonic() + self._interval

    def latest_weights(self) -> PublishedWeights | None:
        """The latest published weights as of the last report (refreshed when due)."""
        if time.monotonic() >= self._next_report:
            self.report()
        return self._weights

    def stopped(self) -> bool:
        """The stop flag as of the last report (refreshed when due)."""
        if time.monotonic() >= self._next_report:
            self.report()
        return self._stop

    def should_stop(self) -> bool:
        """Whether the actor stops before its next env step."""
        budget = self._nb_steps
        if budget is not None:
            ahead = (self._steps - self._steps_at_report) * self._nb_actors
            if self._total + ahead >= budget:
                self.report()
        return self.stopped() or (budget is not None and self._total >= budget)


class _LearnerBoardReporter:
    """`LearnerProgress` reporting to the board every `interval` seconds; keeps the stop
    flag of the reply."""

    def __init__(self, board: Any, interval: float) -> None:
        self._board = board
        self._interval = interval
        self._next_report = 0.0
        self.stop = False

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        if time.monotonic() >= self._next_report:
            self.report(runner)

    def report(self, runner: LearnerRunner) -> None:
        """Sends the runner's counters now."""
        loss = runner.metrics.get("loss")
        report = LearnerReport(
            updates=runner.updates,
            sequences=runner.sequences_received,
            env_steps=runner.env_steps_received,
            version=runner.version,
            loss=math.nan if loss is None else float(loss),
        )
        self.stop = self.stop or ray.get(self._board.learner_report.remote(report))
        self._next_report = time.monotonic() + self._interval

    def should_stop(self) -> bool:
        return self.stop


class ActorWorker:
    """One actor as a Ray actor (its process hosts one `ActorRunner`).

    Args:
        setup: How its process prepares itself.
    """

    def __init__(self, setup: ChildSetup) -> None:
        prepare_process(setup)

    def place(self) -> WorkerPlace:
        """Where this worker runs (the driver waits on it to know the worker started)."""
        return _place()

    def run(
        self, start: Deferred[ActorStart], board: Any, learner: Any, interval: float
    ) -> ActorSummary:
        """Acts until the board's stop flag or the env-step budget; returns its summary.

        Args:
            start: The actor's start arguments.
            board: The run's board.
            learner: The learner's Ray actor (experience goes to its `put_experience`).
            interval: Seconds between reports to the board.
        """
        actor = start.load()
        spec = actor.spec
        pulse = _BoardPulse(board, f"actor {actor.index}")
        with pulse.busy("start-up"):  # the env, maybe a Keras policy
            steps, episodes = ray.get(board.actor_counts.remote(actor.index))
            reporter = _ActorBoardReporter(
                board,
                actor.index,
                steps,
                episodes,
                nb_steps=actor.nb_steps,
                nb_actors=spec.nb_actors,
                interval=interval,
            )
            env = make_actor_envs(spec)
            sender = ActorCallSender(learner, reporter.stopped)
            subscriber = ObjectStoreSubscriber(reporter.latest_weights)
            runner = make_actor_runner(
                actor,
                env,
                sender,
                subscriber,
                reporter,
                initial_steps=steps,
                initial_episodes=episodes,
                liveness=pulse,
            )
        bind_stop_requester(spec.callbacks, _stop_requester(board, f"actor {actor.index}"))
        try:
            runner.run(reporter.should_stop)
        finally:
            env.close()
            subscriber.close()
            sender.close()
        reporter.report()  # the last steps and returns
        return actor_summary(runner)


class LearnerWorker:
    """The learner as a Ray actor; started with `max_concurrency` above 1, so actors'
    `put_experience` calls run in other threads while `run` trains.

    Args:
        setup: How its process prepares itself.
        inbox_size: Experience batches it holds before a sending actor waits.
    """

    def __init__(self, setup: ChildSetup, inbox_size: int) -> None:
        prepare_process(setup)
        self._inbox = Inbox(inbox_size)

    def place(self) -> WorkerPlace:
        """Where this worker runs (the driver waits on it to know the worker started)."""
        return _place()

    def put_experience(self, items: list[Experience]) -> bool:
        """An actor's batch; waits for room; False once the learner stopped."""
        return self._inbox.put(items)

    def run(self, start: Deferred[LearnerStart], board: Any, interval: float) -> LearnerOutcome:
        """Trains until the board's stop flag or `nb_trains`; returns the final weights.

        Args:
            start: The learner's start arguments.
            board: The run's board (counters, stop flag, weights references).
            interval: Seconds between reports to the board.
        """
        pulse = _BoardPulse(board, "learner")
        with pulse.busy("start-up"):  # the network, and a checkpoint's restore
            learner_start = start.load()
            spec = learner_start.spec
            learner = build_learner(learner_start)
        learner.run_counters = lambda: ray.get(board.run_counters.remote())
        bind_stop_requester(spec.callbacks, _stop_requester(board, "learner"))
        publisher = ObjectStorePublisher(board)
        receiver = InboxReceiver(self._inbox)
        reporter = _LearnerBoardReporter(board, interval)
        runner = make_learner_runner(
            learner_start, learner, receiver, publisher, reporter, liveness=pulse
        )
        try:
            runner.run(reporter.should_stop)
        finally:
            receiver.close()  # refuses the actors' waiting and later batches
            reporter.report(runner)
            publisher.close()
        return LearnerOutcome(learner_summary(runner), learner.get_weights())
