"""Typed contracts of a distributed run: options, the run spec, limits, start arguments.

The manager validates its inputs once, into a `RunSpec`, and from then on only these
frozen dataclasses cross process boundaries (never the manager itself): a backend starts
each actor with an `ActorStart` and the learner with a `LearnerStart`. Nothing here
imports TensorFlow.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import TrainingState
from r2d2_agent.config import R2D2Config
from r2d2_agent.math import resumed_seed
from r2d2_agent.roles.builder import R2D2Builder

__all__ = ["ActorStart", "LearnerStart", "RunOptions", "RunSpec", "TrainLimits"]


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


def _check_picklable(name: str, value: Any, hint: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as exc:
        raise TypeError(
            f"{name} must be picklable to reach the child processes ({hint}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _describe_non_factory(value: Any) -> str:
    """What was passed instead of an env factory; for an env instance, what to pass."""
    name = type(value).__name__
    if not (hasattr(value, "reset") and hasattr(value, "step")):
        return name
    spec = getattr(value, "spec", None)
    env_id = getattr(spec, "id", None) or "<env id>"
    return (
        f"an env instance ({name}): each actor builds its own env from the factory, so "
        f"pass functools.partial(gymnasium.make, {env_id!r}) (with any make() keyword "
        "arguments) instead"
    )


@dataclass(frozen=True)
class RunOptions:
    """How the manager runs the processes (the `R2D2Manager` keyword arguments).

    Raises:
        ValueError: On an invalid value; the message names the option and the value.
    """

    max_actor_restarts: int = 3
    """Restarts allowed per actor index after it dies; one more death stops the run."""
    actors_on_cpu: bool = True
    """Hide GPUs from actor processes, so N actors do not each reserve GPU memory."""
    rate_limit: bool = True
    """Keep learner updates and received env steps in the ratio `env_steps_per_update`;
    False lets acting and learning run free."""
    env_steps_per_update: float | None = None
    """Env steps (all actors together) per learner update when rate limiting; None means
    `config.train_interval`, the single-process agent's ratio."""
    ratio_tolerance: float = 16.0
    """Allowed drift from that ratio, in learner updates."""
    publish_interval: int = 10
    """Learner updates between weight publications."""
    send_batch_size: int = 4
    """Sequences an actor gathers before one send (also sent at every episode end)."""
    progress: bool = True
    """Show a progress bar (tqdm; quiet anyway when stderr is not a terminal)."""
    shutdown_timeout: float = 10.0
    """Seconds the children get to stop before they are killed; a child inside a declared
    long operation (the learner writing its final checkpoint) gets more, as long as the
    stall watchdog sees it alive (without a watchdog, as long as the operation lasts)."""
    stall_timeout: float | None = 300.0
    """Seconds without any sign of life from a child (its loop's heartbeat) before the
    watchdog takes it for frozen or deadlocked: a stalled actor is killed and restarted
    like a dead one, a stalled learner is killed and stops the run with
    `R2D2ProcessError`. Declared long operations (start-up, the first trace, callback
    hooks such as checkpoints, sends held by back-pressure) beat from a thread, so they
    never count as silence. None: no watchdog."""
    tf_verbose: bool | None = None
    """Show TensorFlow's native start-up logs in the children (CUDA, absl, oneDNN
    notices); None follows the `R2D2_TF_VERBOSE` environment variable (hidden unless 1)."""

    def __post_init__(self) -> None:
        _check_int("max_actor_restarts", self.max_actor_restarts, 0)
        _check_int("publish_interval", self.publish_interval, 1)
        _check_int("send_batch_size", self.send_batch_size, 1)
        if self.env_steps_per_update is not None:
            _check_positive("env_steps_per_update", self.env_steps_per_update)
        _check_positive("ratio_tolerance", self.ratio_tolerance)
        if self.ratio_tolerance < 1:
            raise ValueError(f"ratio_tolerance must be >= 1 update, got {self.ratio_tolerance!r}")
        _check_positive("shutdown_timeout", self.shutdown_timeout)
        if self.stall_timeout is not None:
            _check_positive("stall_timeout", self.stall_timeout)
        if self.tf_verbose is not None and not isinstance(self.tf_verbose, bool):
            raise ValueError(f"tf_verbose must be True, False or None, got {self.tf_verbose!r}")


@dataclass(frozen=True)
class RunSpec:
    """Everything the processes of a run need, validated once when it is made.

    Attributes:
        env_factory: Picklable zero-argument callable returning a Gymnasium env.
        builder: Makes every role's components (config, image model, observation dtype,
            numpy or Keras acting).
        nb_actors: Number of actor processes.
        callbacks: Picklable callbacks; each process gets its own copy.
        options: How the processes run.
        log_level: Level of the children's root logger (the parent's `r2d2_agent` level).

    Raises:
        TypeError: If the env factory is not callable, or a part is not picklable.
        ValueError: If `nb_actors < 1`.
    """

    env_factory: Callable[[], Any]
    builder: R2D2Builder
    nb_actors: int
    callbacks: tuple[Any, ...] = ()
    options: RunOptions = field(default_factory=RunOptions)
    log_level: int = logging.WARNING

    def __post_init__(self) -> None:
        _check_int("actor_num", self.nb_actors, 1)
        if not callable(self.env_factory):
            raise TypeError(
                "env_factory must be a zero-argument callable returning a gymnasium env, "
                f"got {_describe_non_factory(self.env_factory)}"
            )
        _check_picklable(
            "env_factory",
            self.env_factory,
            "use a module-level function or functools.partial(gymnasium.make, "
            "'CartPole-v1'); lambdas and local functions cannot be pickled",
        )
        _check_picklable("image_model", self.builder.image_model, "define it at module level")
        _check_picklable(
            "callbacks", list(self.callbacks), "define callback classes at module level"
        )

    @property
    def config(self) -> R2D2Config:
        """The agent's configuration."""
        return self.builder.config

    @property
    def env_steps_per_update(self) -> float | None:
        """The rate limiter's env steps per update (None when acting and learning run free)."""
        if not self.options.rate_limit:
            return None
        return float(self.options.env_steps_per_update or self.config.train_interval)

    def actor_seed(self, index: int, restarts: int, resumed_at: int = 0) -> int | None:
        """Seed of actor `index` after `restarts` restarts, that of its first env (env `j`
        uses it + j): `seed + index * envs_per_actor` at first, then shifted by all
        actors' envs per restart so a restarted actor does not replay its predecessor's
        episodes. A run resumed from a checkpoint at `resumed_at` env steps counts from
        `resumed_seed(seed, resumed_at)` instead of `seed`, so that it does not replay the
        episodes the run began with."""
        base = resumed_seed(self.config.seed, resumed_at)
        if base is None:
            return None
        return base + self.config.envs_per_actor * (index + self.nb_actors * restarts)

    def actor_stream(self, index: int, restarts: int) -> int:
        """Stream id of actor `index` after `restarts` restarts (unique in the run; env
        `j` of the actor sends on `stream * envs_per_actor + j`)."""
        return index + self.nb_actors * restarts

    def actor_epsilon(self, index: int) -> tuple[float, ...]:
        """Exploration rates of actor `index`'s envs: the Ape-X schedule over all
        `nb_actors * envs_per_actor` envs, env `j` at `index * envs_per_actor + j`."""
        n = self.config.envs_per_actor
        return tuple(
            self.builder.actor_epsilon(index * n + j, self.nb_actors * n) for j in range(n)
        )


@dataclass(frozen=True)
class TrainLimits:
    """When one `train` call stops: the first limit reached (at least one is needed).

    Attributes:
        nb_steps: Env steps over all actors.
        nb_trains: Learner updates.
        max_seconds: Wall-clock seconds from the call, start-up included.

    Raises:
        ValueError: If no limit is given or one is not positive.
    """

    nb_steps: int | None = None
    nb_trains: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("nb_steps", "nb_trains"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
        if self.max_seconds is not None:
            _check_positive("max_seconds", self.max_seconds)
        if self.nb_steps is None and self.nb_trains is None and self.max_seconds is None:
            raise ValueError("give at least one limit: nb_steps, nb_trains or max_seconds")


@dataclass(frozen=True)
class ActorStart:
    """What one actor process is started with.

    Attributes:
        spec: The run.
        index: The actor's index in `[0, nb_actors)`.
        seed: Seeds the first env's first reset and exploration (env `j`: seed + j).
        epsilon: Its envs' exploration rates (one per env).
        nb_steps: Stop once all actors together took this many env steps (None: no limit).
        stream: Unique per actor process of the run, a restarted actor included: the
            learner tells the actors' frames apart by it.
    """

    spec: RunSpec
    index: int
    seed: int | None
    epsilon: tuple[float, ...]
    nb_steps: int | None
    stream: int = 0


@dataclass(frozen=True)
class LearnerStart:
    """What the learner process is started with.

    Attributes:
        spec: The run.
        nb_trains: Stop once the learner's updates reach this many (None: no limit);
            counted from the checkpoint's updates when resuming.
        initial_weights: Weights to start from, as the learner publishes them (a
            previous `train` call's: `R2D2Learner.get_published_weights`).
        resume: A checkpoint's state (weights, optimizer state, counters) to continue
            from; read and checked in the parent, so every backend hands it over the same
            way (it wins over `initial_weights`).
    """

    spec: RunSpec
    nb_trains: int | None
    initial_weights: list[np.ndarray] | None = None
    resume: TrainingState | None = None
