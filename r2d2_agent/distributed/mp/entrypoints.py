"""The mains of the actor and learner processes: build the role, wire the channels, run.

Each builds its runner from its typed start arguments (`ActorStart`, `LearnerStart`) and
the multiprocessing channels, reports progress in the shared `RunCounters` and sends its
events (`EpisodeFinished`, `WeightsLayout`, summaries) to the parent. Nothing here imports
TensorFlow at module level.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

from r2d2_agent.checkpoints import TrainingCounters
from r2d2_agent.distributed.learner_runner import LearnerRunner
from r2d2_agent.distributed.messages import (
    EpisodeFinished,
    Liveness,
    StopRequested,
    WeightsLayout,
    WeightsSegment,
)
from r2d2_agent.distributed.mp.bootstrap import Deferred, ParentWatch
from r2d2_agent.distributed.mp.pipes import PipeExperienceReceiver, PipeExperienceSender
from r2d2_agent.distributed.mp.shared_state import RunCounters, SharedFlag
from r2d2_agent.distributed.mp.shared_weights import SharedWeightsHandle, WeightsSpec
from r2d2_agent.distributed.mp.weights_channel import (
    AttachedWeightsPublisher,
    SharedWeightsSubscriber,
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

__all__ = ["actor_main", "learner_main"]


class _ActorReporter:
    """`ActorProgress` writing the actor's counter slots and sending episode ends."""

    def __init__(self, counters: RunCounters, index: int, events: Connection) -> None:
        self._counters = counters
        self._index = index
        self._events = events
        self._episodes = counters.actor_episodes(index)  # restarted: the count goes on

    def on_steps(self, total_steps: int) -> None:
        self._counters.set_actor_steps(self._index, total_steps)

    def run_env_steps(self) -> int:
        return self._counters.total_steps()

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        self._episodes += 1
        self._counters.set_actor_episodes(self._index, self._episodes)
        self._events.send(EpisodeFinished(float(episode_return), int(episode_steps)))


def _stop_requester(events: Connection, who: str):
    """What `R2D2Callback.request_stop` calls in a child: a `StopRequested` event."""

    def request(reason: str) -> None:
        events.send(StopRequested(f"{who}: {reason}"))

    return request


def _run_counters(counters: RunCounters):
    """The learner's view of the run's env steps and episodes (`R2D2Learner.run_counters`)."""

    def read() -> TrainingCounters:
        episodes = counters.all_actor_episodes()
        return TrainingCounters(
            env_steps=counters.total_steps(),
            episodes=sum(episodes),
            actor_env_steps=tuple(counters.all_actor_steps()),
            actor_episodes=tuple(episodes),
        )

    return read


class _LearnerReporter:
    """`LearnerProgress` writing the learner's counters."""

    def __init__(self, counters: RunCounters) -> None:
        self._counters = counters

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        self._counters.set_learner(
            updates=runner.updates,
            sequences=runner.sequences_received,
            env_steps=runner.env_steps_received,
            version=runner.version,
            loss=runner.metrics.get("loss"),
        )


def actor_main(
    events: Connection,
    start: Deferred[ActorStart],
    weights: SharedWeightsHandle,
    experience: Connection,
    stop: SharedFlag,
    counters: RunCounters,
    *,
    pulse: Liveness | None = None,
) -> None:
    """Actor process: builds its env and channels, then runs an `ActorRunner`.

    Args:
        events: Pipe to the parent.
        start: The actor's start arguments.
        weights: The shared weights segment to read from.
        experience: Write end of this actor's experience pipe.
        stop: The run's stop flag.
        counters: The run's counters.
        pulse: Its heartbeat for the parent's stall watchdog (None: none).
    """
    pulse = pulse or Liveness()
    with pulse.busy("start-up"):  # user objects, the env, maybe a Keras policy
        actor = start.load()
        spec = actor.spec
        env = make_actor_envs(spec)
        sender = PipeExperienceSender(experience, stop)
        subscriber = SharedWeightsSubscriber(weights)
        runner = make_actor_runner(
            actor,
            env,
            sender,
            subscriber,
            _ActorReporter(counters, actor.index, events),
            initial_steps=counters.actor_steps(actor.index),
            initial_episodes=counters.actor_episodes(actor.index),
            liveness=pulse,
        )
    bind_stop_requester(spec.callbacks, _stop_requester(events, f"actor {actor.index}"))
    stopped = ParentWatch(stop)

    def should_stop() -> bool:
        if stopped():
            return True
        return actor.nb_steps is not None and counters.total_steps() >= actor.nb_steps

    try:
        runner.run(should_stop)
    finally:
        env.close()
        subscriber.close()
        sender.close()
    events.send(actor_summary(runner))


def learner_main(
    events: Connection,
    start: Deferred[LearnerStart],
    control: Connection,
    stop: SharedFlag,
    counters: RunCounters,
    *,
    pulse: Liveness | None = None,
) -> None:
    """Learner process: builds the learner, reports its weights layout, trains.

    Protocol: sends `WeightsLayout` on `events`, waits for `WeightsSegment` on `control`
    (the parent creates and owns the segment), then runs a `LearnerRunner` whose receiver
    takes actor pipes from `control` (`ConnectActor`).

    Args:
        events: Pipe to the parent.
        start: The learner's start arguments.
        control: Read end of the parent's control pipe.
        stop: The run's stop flag.
        counters: The run's counters.
        pulse: Its heartbeat for the parent's stall watchdog (None: none).
    """
    pulse = pulse or Liveness()
    with pulse.busy("start-up"):  # the network, and a checkpoint's restore
        learner_start = start.load()
        spec = learner_start.spec
        learner = build_learner(learner_start)
    learner.run_counters = _run_counters(counters)
    bind_stop_requester(spec.callbacks, _stop_requester(events, "learner"))
    events.send(WeightsLayout(WeightsSpec.from_arrays(learner.get_published_weights())))
    stopped = ParentWatch(stop, every=1)
    while not control.poll(0.1):
        pulse.beat()
        if stopped():
            return
    message = control.recv()
    if not isinstance(message, WeightsSegment):
        raise RuntimeError(f"expected the weights segment first, got {message!r}")
    publisher = AttachedWeightsPublisher(message.handle)
    receiver = PipeExperienceReceiver(control)
    reporter = _LearnerReporter(counters)
    runner = make_learner_runner(
        learner_start, learner, receiver, publisher, reporter, liveness=pulse
    )
    try:
        runner.run(ParentWatch(stop, every=16))
    finally:
        # The run ends with the learner (its `nb_trains`, a stop, a failure): actors stop
        # at their next check instead of failing on the experience pipes it closes.
        stop.set()
        reporter.on_learner_progress(runner)
        receiver.close()
        publisher.close()
    events.send(learner_summary(runner))
