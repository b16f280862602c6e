"""Builds the actor and learner runners from their typed start arguments and a backend's
channels, so every backend (multiprocessing, Ray) runs the same loops the same way.

A backend provides the transport (the four interfaces of `interfaces`), where progress
goes (`ActorProgress`, `LearnerProgress`) and how the run's counters are read; the rest
(which learner state to start from, the actor's seed, epsilon, stream and counts, the
options of both loops, the summaries) is decided here once. Nothing here imports
TensorFlow at module level.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from r2d2_agent.distributed.actor_runner import ActorProgress, ActorRunner
from r2d2_agent.distributed.learner_runner import LearnerProgress, LearnerRunner
from r2d2_agent.distributed.messages import (
    ActorSummary,
    ExperienceReceiver,
    ExperienceSender,
    LearnerSummary,
    Liveness,
    WeightsPublisher,
    WeightsSubscriber,
)
from r2d2_agent.distributed.spec import ActorStart, LearnerStart, RunSpec
from r2d2_agent.roles.vector_loop import EnvBatch, EnvList, GymVectorEnvBatch, is_vector_env

__all__ = [
    "actor_summary",
    "build_learner",
    "make_actor_envs",
    "learner_summary",
    "make_actor_runner",
    "make_learner_runner",
]


def build_learner(start: LearnerStart) -> Any:
    """The run's `R2D2Learner`: restored from `start.resume` if given, else holding
    `start.initial_weights` if given, else freshly initialised."""
    learner = start.spec.builder.make_learner()
    if start.resume is not None:
        learner.restore(start.resume)
    elif start.initial_weights is not None:
        learner.set_published_weights(start.initial_weights)
    return learner


def make_actor_envs(spec: RunSpec) -> EnvBatch:
    """An actor's `config.envs_per_actor` envs from the run's env factory: one call when
    the factory returns a Gymnasium `VectorEnv` (of that many envs, checked by the
    manager), else one call per env. The caller closes them (`close()`).

    Raises:
        ValueError: If a vector env holds a different number of envs.
    """
    n = spec.config.envs_per_actor
    first = spec.env_factory()
    if is_vector_env(first):
        if first.num_envs != n:
            first.close()
            raise ValueError(
                f"the env factory's vector env has {first.num_envs} envs, but envs_per_actor={n}"
            )
        return GymVectorEnvBatch(first)
    return EnvList([first] + [spec.env_factory() for _ in range(n - 1)])


def make_actor_runner(
    start: ActorStart,
    env: Any,
    sender: ExperienceSender,
    subscriber: WeightsSubscriber,
    progress: ActorProgress,
    *,
    initial_steps: int,
    initial_episodes: int,
    liveness: Liveness | None = None,
) -> ActorRunner:
    """The `ActorRunner` of actor `start.index`.

    Args:
        start: The actor's start arguments.
        env: Its envs (`make_actor_envs`), owned by the caller.
        sender: Where its experience goes.
        subscriber: Where its weights come from.
        progress: Where it reports steps and episodes.
        initial_steps: Env steps this actor index took before (restarts, resumed runs).
        initial_episodes: Episodes it finished before.
        liveness: How it shows the backend's stall watchdog it is alive (None: no
            watchdog).
    """
    spec = start.spec
    return ActorRunner(
        start.index,
        spec.builder,
        env,
        sender,
        subscriber,
        epsilon=start.epsilon,
        seed=start.seed,
        send_batch_size=spec.options.send_batch_size,
        progress=progress,
        callbacks=spec.callbacks,
        stream=start.stream,
        initial_steps=initial_steps,
        initial_episodes=initial_episodes,
        liveness=liveness,
    )


def make_learner_runner(
    start: LearnerStart,
    learner: Any,
    receiver: ExperienceReceiver,
    publisher: WeightsPublisher,
    progress: LearnerProgress,
    *,
    liveness: Liveness | None = None,
) -> LearnerRunner:
    """The `LearnerRunner` of the run, with the run's publish interval, rate limit and
    update budget (`liveness`: how it shows the backend's stall watchdog it is alive)."""
    spec = start.spec
    return LearnerRunner(
        learner,
        receiver,
        publisher,
        publish_interval=spec.options.publish_interval,
        env_steps_per_update=spec.env_steps_per_update,
        ratio_tolerance=spec.options.ratio_tolerance,
        nb_trains=start.nb_trains,
        callbacks=spec.callbacks,
        progress=progress,
        liveness=liveness,
    )


def actor_summary(runner: ActorRunner) -> ActorSummary:
    """What an actor reports when it stops normally."""
    return ActorSummary(
        pid=os.getpid(),
        policy=type(runner.policy).__name__,
        tensorflow_loaded="tensorflow" in sys.modules,
        steps=runner.steps,
        weight_pulls=runner.weight_pulls,
        items_sent=runner.items_sent,
        seconds=runner.time.shares("acting"),
    )


def learner_summary(runner: LearnerRunner) -> LearnerSummary:
    """What the learner reports when it stops normally."""
    return LearnerSummary(
        pid=os.getpid(),
        updates=runner.updates,
        sequences=runner.sequences_received,
        seconds=runner.time.shares("other"),
    )
