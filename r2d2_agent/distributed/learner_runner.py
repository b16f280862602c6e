"""`LearnerRunner`: the learner's loop, written against the transport interfaces only.

Each iteration drains experience into replay (waiting only when it cannot train), does at
most one update and publishes the online weights every `publish_interval` updates (no
sooner than the publisher's `min_interval` seconds after the previous publish). A
`RateLimiter` keeps learning and acting in a fixed ratio. The runner does not know whether
its actors run in the same process, other processes or other machines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from r2d2_agent.distributed.messages import (
    Experience,
    ExperienceReceiver,
    Liveness,
    WeightsPublisher,
)
from r2d2_agent.distributed.reports import TimeSplit
from r2d2_agent.roles.hooks import MetricLogger, bind_metric_logger, call_hooks

__all__ = ["LearnerProgress", "LearnerRunner", "RateLimiter"]


class LearnerProgress(Protocol):
    """Where a learner reports progress, after every loop iteration."""

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        """Reads the runner's counters."""
        ...


class RateLimiter:
    """Keeps learner updates and received env steps in a fixed ratio (as Reverb's
    sample-to-insert limiter).

    Counting from the moment replay first holds enough sequences to train, the learner
    keeps `updates ~ env_steps_received / env_steps_per_update` within +- `tolerance`
    updates. Ahead of the data it waits for experience instead of training; behind, it
    stops receiving, so the bounded transport pushes back on the actors.

    Args:
        env_steps_per_update: Target env steps per update; None disables the limit.
        tolerance: Allowed drift from the target, in updates.
    """

    def __init__(self, env_steps_per_update: float | None, tolerance: float) -> None:
        self.env_steps_per_update = env_steps_per_update
        self.tolerance = float(tolerance)
        self._start_steps: int | None = None  # env steps received when training could start
        self._start_updates = 0  # updates done by then (a resumed learner starts above 0)

    def start(self, env_steps_received: int, updates: int = 0) -> None:
        """Marks the moment training became possible (only the first call counts).

        Args:
            env_steps_received: Env steps received so far.
            updates: Updates done so far (those of a resumed run are not held against
                the env steps of this one).
        """
        if self._start_steps is None:
            self._start_steps = env_steps_received
            self._start_updates = updates

    def drift(self, updates: int, env_steps_received: int) -> float:
        """Updates done minus updates the received env steps allow (> 0: learner ahead)."""
        if self._start_steps is None or self.env_steps_per_update is None:
            return 0.0
        earned = (env_steps_received - self._start_steps) / self.env_steps_per_update
        return (updates - self._start_updates) - earned

    def may_train(self, updates: int, env_steps_received: int) -> bool:
        """Whether one more update keeps the learner within the tolerance."""
        return self.drift(updates, env_steps_received) < self.tolerance

    def may_receive(self, updates: int, env_steps_received: int) -> bool:
        """Whether taking more experience keeps the actors within the tolerance."""
        return self.drift(updates, env_steps_received) > -self.tolerance


class LearnerRunner:
    """The learner loop: drain experience into replay, train, publish weights.

    Weights are published before the first update, every `publish_interval` updates and,
    when the loop ends normally, after the last one. If the publisher has a
    `min_interval` (Ray's: its actors learn of new weights only with their reports), a due
    publish waits for the loop's first iteration (training or waiting) at least that many
    seconds after the previous publish, and publishes the weights of that moment. Without
    rate limiting the loop trains as fast as it can and takes at most `receive_batch`
    items per update (so very fast actors are still slowed down by back-pressure, never
    buffered without bound).

    Args:
        learner: An `R2D2Learner` (duck typing: `config`, `add`, `ready`, `step`,
            `get_published_weights`).
        receiver: Experience in.
        publisher: Weights out.
        publish_interval: Learner updates between weight publications.
        receive_batch: Most items taken per iteration; default 4 x `config.batch_size`.
        env_steps_per_update: Target env steps per update; None disables rate limiting.
        ratio_tolerance: Allowed drift from the target, in updates.
        nb_trains: Stop once the learner's updates reach this many (None: until
            `should_stop`); a resumed learner's updates count, as its `updates` start
            from the checkpoint's.
        receive_timeout: Seconds to wait for experience when there is nothing else to do.
        callbacks: Callbacks whose `on_r2d2_learner_*` hooks run here.
        progress: Optional progress sink.
        liveness: Shows the backend's stall watchdog that the loop is alive: a beat per
            iteration; the first trace and the callback hooks (a checkpoint may write
            gigabytes of replay) run as busy.
        clock: Seconds of a monotonic clock (for the publisher's `min_interval`).
    """

    def __init__(
        self,
        learner: Any,
        receiver: ExperienceReceiver,
        publisher: WeightsPublisher,
        *,
        publish_interval: int = 10,
        receive_batch: int | None = None,
        env_steps_per_update: float | None = None,
        ratio_tolerance: float = 16.0,
        nb_trains: int | None = None,
        receive_timeout: float = 0.05,
        callbacks: Sequence[Any] = (),
        progress: LearnerProgress | None = None,
        liveness: Liveness | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.learner = learner
        self.receiver = receiver
        self.publisher = publisher
        self.publish_interval = publish_interval
        self.receive_batch = receive_batch or 4 * learner.config.batch_size
        self.rate = RateLimiter(env_steps_per_update, ratio_tolerance)
        self.nb_trains = nb_trains
        self.receive_timeout = receive_timeout
        self.callbacks = tuple(callbacks)
        self.progress = progress
        self.liveness = liveness or Liveness()
        self.updates = int(getattr(learner, "updates", 0))
        """Learner updates done (a resumed learner's count goes on)."""
        self.sequences_received = int(getattr(learner, "sequences_added", 0))
        """Experience items added to replay (a resumed learner's count goes on)."""
        self.env_steps_received = 0
        """Env steps those items account for."""
        self.version = 0
        """Latest published weights version."""
        self._clock = clock
        self._published_at = -float("inf")  # clock of the latest publish
        self._published_updates: int | None = None  # updates the latest publish held
        self._publish_due = False
        self.metrics: dict[str, float] = {}
        """Metrics of the latest update."""
        self.time = TimeSplit()
        """Where `run`'s wall time went: "learning" (updates), "replay_add", "receiving"
        (draining what is there), "waiting" (for experience, when it could not train),
        "publishing", "tracing" (building the update graph once, at the start); the rest
        "other" (hooks, progress reports)."""

    def _can_train(self) -> bool:
        if not self.learner.ready:
            return False
        self.rate.start(self.env_steps_received, self.updates)
        return self.rate.may_train(self.updates, self.env_steps_received)

    def _add(self, items: list[Experience]) -> None:
        for item in items:
            self.learner.add(item.record, item.stream)
            self.sequences_received += 1
            self.env_steps_received += int(item.env_steps)

    def publish(self) -> int:
        """Publishes the learner's current weights (`get_published_weights`: the
        online ones, then the policy's average with `policy_average_updates`); returns
        the new version."""
        with self.time.measure("publishing"):
            self.version = self.publisher.publish(self.learner.get_published_weights())
        self._published_at = self._clock()
        self._published_updates = self.updates
        self._publish_due = False
        return self.version

    def _publish_if_due(self) -> None:
        """Publishes a due publish once the publisher's `min_interval` has passed."""
        if self._publish_due and (
            self._clock() - self._published_at >= self.publisher.min_interval
        ):
            self.publish()

    def _run_counts(self) -> tuple[int, int]:
        """The run's env steps (the learner's `counters()`, which knows a resumed run's
        count; else the env steps received) and the updates, for metrics."""
        counters = getattr(self.learner, "counters", None)
        env_steps = counters().env_steps if counters is not None else self.env_steps_received
        return env_steps, self.updates

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Trains until `should_stop()` or `nb_trains` updates.

        Weights are published before the first update and, when the loop ends normally
        (not when it raises), after the last one, before the end hook, and again after it
        if the hook replaced them (`learner.weights_replaced`). The update's graph
        is built right after the first publish, while the actors start.
        """
        bind_metric_logger(
            self.callbacks, MetricLogger(self.callbacks, "learner", self._run_counts)
        )
        self._hooks("on_r2d2_learner_begin")
        self.time.start()
        self.publish()
        with self.time.measure("tracing"), self.liveness.busy("tracing the update"):
            self.learner.trace()
        while not should_stop() and (self.nb_trains is None or self.updates < self.nb_trains):
            self.liveness.beat()
            self._iteration()
        if self.updates != self._published_updates:
            self.publish()
        self.time.stop()
        replaced = getattr(self.learner, "weights_replaced", 0)
        self._hooks("on_r2d2_learner_end")
        if getattr(self.learner, "weights_replaced", 0) != replaced:
            self.publish()  # an end hook set weights (EvaluationCallback's restore_best)

    def _hooks(self, name: str) -> None:
        """Runs a learner hook of every callback (busy: a checkpoint may take long)."""
        if self.callbacks:
            with self.liveness.busy(name):
                call_hooks(self.callbacks, name, self.learner)

    def _iteration(self) -> None:
        can_train = self._can_train()
        if not can_train or self.rate.may_receive(self.updates, self.env_steps_received):
            timeout = 0.0 if can_train else self.receive_timeout
            with self.time.measure("receiving" if can_train else "waiting"):
                received = self.receiver.receive(self.receive_batch, timeout)
            with self.time.measure("replay_add"):
                self._add(received)
            can_train = self._can_train()
        if can_train:
            self._hooks("on_r2d2_learner_train_begin")
            with self.time.measure("learning"):
                self.metrics = self.learner.step()
            self.updates += 1
            self._hooks("on_r2d2_learner_train_end")
            if self.updates % self.publish_interval == 0:
                self._publish_due = True
        self._publish_if_due()
        if self.progress is not None:
            self.progress.on_learner_progress(self)
