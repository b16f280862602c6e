"""The Ray actors of a run: `ActorWorker` and `LearnerWorker`, and how they report.

Each worker prepares its process in its constructor (`prepare_process`: GPU hiding or
memory growth before any TensorFlow import, logging, seeds), then `run` builds its role
from the typed start arguments (`ActorStart`, `LearnerStart`, carried `Deferred`) with
`wiring`, exactly as the multiprocessing backend does, over the Ray channels. Reports to
the run's board go every `RayOptions.report_interval` seconds without waiting for the
reply (at most one report in flight); the reply, read at the next report, carries the stop
flag.
"""

from __future__ import annotations

import math
import os
import pickle
import threading
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
    its beats; during a declared long operation a keep-alive thread sends heartbeats.

    A busy section is told to the board only once it lasts: the keep-alive thread, which
    wakes every `announce_after` seconds, announces it (`set_busy`) when it finds one
    running, and only an announced section is closed on the board. So the frequent short
    sections (a send that does not wait) cost no call.

    Args:
        board: The run's board.
        who: The worker's name on the board ("learner", "actor <i>").
        interval: Seconds between heartbeats during a busy section.
        announce_after: Seconds between the keep-alive thread's looks at the section.
    """

    def __init__(
        self, board: Any, who: str, interval: float = 1.0, announce_after: float = 0.1
    ) -> None:
        super().__init__(announce_after)
        self._board = board
        self._who = who
        self._heartbeat_interval = interval
        self._lock = threading.Lock()
        self._busy = False  # inside a busy section
        self._announced = False  # the board was told of it
        self._last_heartbeat = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_lock")
        return {**state, "_busy": False, "_announced": False}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def beat(self) -> None:
        """Nothing: the loop's reports to the board, every `report_interval`, are its
        signs of life (a call per env step would cost more than the step)."""

    def keep_alive(self) -> None:
        with self._lock:
            if not self._busy:
                return
            now = time.monotonic()
            if not self._announced:
                self._announced = True
                self._last_heartbeat = now
                self._board.set_busy.remote(self._who, True)  # also a sign of life
            elif now - self._last_heartbeat >= self._heartbeat_interval:
                self._last_heartbeat = now
                self._board.heartbeat.remote(self._who)

    def set_busy(self, busy: bool) -> None:
        with self._lock:
            self._busy = busy
            if not busy and self._announced:
                self._announced = False
                self._board.set_busy.remote(self._who, False)


class _ActorBoardReporter:
    """`ActorProgress` reporting to the board; also the actor's stop condition.

    It reports every `interval` seconds without waiting: the reply (stop flag, the run's
    env steps, the latest weights, its lease) is taken at the next due report, and a new
    report goes only once the previous one was answered. With `nb_steps` the actor steps
    only below its lease of the budget (`RunBoard`): each report asks for enough to last
    about three intervals at this actor's measured rate; an actor at the end of its lease
    reports and waits for the reply, and stops if the board has nothing left to lease
    (the other actors hold the rest of the budget).
    """

    def __init__(
        self,
        board: Any,
        index: int,
        steps: int,
        episodes: int,
        *,
        nb_steps: int | None,
        interval: float,
        step_size: int = 1,
    ) -> None:
        self._board = board
        self._index = index
        self._steps = steps
        self._episodes = episodes
        self._returns: list[float] = []
        self._interval = interval
        self._step_size = step_size  # env steps of one actor step (its envs)
        self._lease = None if nb_steps is None else steps  # nothing leased before a reply
        self._next_report = 0.0
        self._steps_at_report = steps
        self._total = 0
        self._stop = False
        self._weights: PublishedWeights | None = None
        self._in_flight: tuple[Any, int] | None = None  # (reply ref, steps it reported)
        self._rate = 0.0  # this actor's env steps per second between its last reports
        self._rate_mark: tuple[float, int] | None = None  # (time, steps) of a report

    def on_steps(self, total_steps: int) -> None:
        self._steps = total_steps

    def run_env_steps(self) -> int:
        """The run's env steps as of the last report, plus this actor's since then."""
        return self._total + self._steps - self._steps_at_report

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        self._episodes += 1
        self._returns.append(float(episode_return))

    def _send(self) -> None:
        known = 0 if self._weights is None else self._weights.version
        report = ActorReport(
            self._index,
            self._steps,
            self._episodes,
            tuple(self._returns),
            known,
            wanted=self._wanted(),
        )
        self._returns.clear()
        self._in_flight = (self._board.actor_report.remote(report), self._steps)
        now = time.monotonic()
        self._measure_rate(now)
        self._next_report = now + self._interval

    def _wanted(self) -> int:
        """Env steps to ask to hold ahead: three intervals at the measured rate (a report
        interval, its reply's trip, a margin), and at least 16 actor steps."""
        return max(16 * self._step_size, math.ceil(3.0 * self._interval * self._rate))

    def _measure_rate(self, now: float) -> None:
        """Updates the env steps per second from the steps since the previous report
        (measured over at least one interval)."""
        if self._rate_mark is None:
            self._rate_mark = (now, self._steps)
            return
        then, steps = self._rate_mark
        if now - then >= self._interval and now > then:
            self._rate = (self._steps - steps) / (now - then)
            self._rate_mark = (now, self._steps)

    def _take(self, wait: bool) -> bool:
        """Reads the reply of the report in flight if there (or `wait`); whether none is
        in flight any more."""
        if self._in_flight is None:
            return True
        ref, steps = self._in_flight
        if not wait and not ray.wait([ref], timeout=0)[0]:
            return False
        reply = ray.get(ref)
        self._in_flight = None
        self._stop = self._stop or reply.stop
        self._total = reply.total_steps
        if reply.weights is not None:  # newer than the weights known
            self._weights = reply.weights
        if self._lease is not None and reply.lease is not None:
            self._lease = max(self._lease, reply.lease)
        self._steps_at_report = steps
        return True

    def report(self) -> None:
        """Sends the counts and returns so far and waits for the reply (the stop flag, the
        run's env steps, the latest weights)."""
        self._take(wait=True)
        self._send()
        self._take(wait=True)

    def _refresh(self) -> None:
        """When a report is due: takes the previous reply if there, and sends a new report
        once the previous one is answered."""
        if time.monotonic() >= self._next_report and self._take(wait=False):
            self._send()

    def latest_weights(self) -> PublishedWeights | None:
        """The latest published weights as of the last reply (refreshed when due)."""
        self._refresh()
        return self._weights

    def stopped(self) -> bool:
        """The stop flag as of the last reply (refreshed when due)."""
        self._refresh()
        return self._stop

    def should_stop(self) -> bool:
        """Whether the actor stops before its next env step: the stop flag, or its lease
        used up with nothing left to lease."""
        if self.stopped():
            return True
        if self._lease is None or self._steps < self._lease:
            return False
        self.report()  # asks for more, and waits for the answer
        return self._stop or self._steps >= self._lease


class _LearnerBoardReporter:
    """`LearnerProgress` reporting to the board every `interval` seconds without waiting;
    keeps the stop flag of the reply, read at the next due report (a new report goes once
    the previous one was answered)."""

    def __init__(self, board: Any, interval: float) -> None:
        self._board = board
        self._interval = interval
        self._next_report = 0.0
        self._in_flight: Any = None
        self.stop = False

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        if time.monotonic() >= self._next_report and self._take(wait=False):
            self._send(runner)

    def _take(self, wait: bool) -> bool:
        """Reads the reply in flight if there (or `wait`); whether none is in flight."""
        if self._in_flight is None:
            return True
        if not wait and not ray.wait([self._in_flight], timeout=0)[0]:
            return False
        self.stop = self.stop or ray.get(self._in_flight)
        self._in_flight = None
        return True

    def report(self, runner: LearnerRunner) -> None:
        """Sends the runner's counters now and waits for the reply."""
        self._take(wait=True)
        self._send(runner)
        self._take(wait=True)

    def _send(self, runner: LearnerRunner) -> None:
        loss = runner.metrics.get("loss")
        report = LearnerReport(
            updates=runner.updates,
            sequences=runner.sequences_received,
            env_steps=runner.env_steps_received,
            version=runner.version,
            loss=math.nan if loss is None else float(loss),
        )
        self._in_flight = self._board.learner_report.remote(report)
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
        self,
        start: Deferred[ActorStart],
        board: Any,
        learner: Any,
        interval: float,
        send_ahead: int = 1,
        send_interval: float = 0.0,
    ) -> ActorSummary:
        """Acts until the board's stop flag or the env-step budget; returns its summary.

        Args:
            start: The actor's start arguments.
            board: The run's board.
            learner: The learner's Ray actor (experience goes to its `put_experience`).
            interval: Seconds between reports to the board.
            send_ahead: Batches of `send_batch_size` sequences it gathers while its
                previous `put_experience` call is in flight (`RayOptions.send_ahead`).
            send_interval: Seconds between its calls while it gathers fewer
                (`RayOptions.send_interval`).
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
                interval=interval,
                step_size=spec.config.envs_per_actor,
            )
            env = make_actor_envs(spec)
            sender = ActorCallSender(
                learner,
                reporter.stopped,
                send_ahead * spec.options.send_batch_size,
                send_interval,
            )
            subscriber = ObjectStoreSubscriber(reporter.latest_weights, background=True)
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
            sender.flush()  # the items it kept
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
        inbox_capacity: Sequences it holds before a sending actor waits.
    """

    def __init__(self, setup: ChildSetup, inbox_capacity: int) -> None:
        prepare_process(setup)
        self._inbox = Inbox(inbox_capacity)

    def place(self) -> WorkerPlace:
        """Where this worker runs (the driver waits on it to know the worker started)."""
        return _place()

    def put_experience(self, payload: bytes) -> bool:
        """An actor's items (a pickled `list[Experience]`); waits for room; False once the
        learner stopped."""
        items = pickle.loads(payload)
        if not isinstance(items, list) or not all(isinstance(i, Experience) for i in items):
            raise TypeError(f"put_experience takes a pickled list of Experience, got {items!r:.80}")
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
        publisher = ObjectStorePublisher(board, min_interval=interval)
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
        return LearnerOutcome(learner_summary(runner), learner.get_published_weights())
