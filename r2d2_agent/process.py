"""The child side of `R2D2Manager`: process bootstrap and the actor and learner mains.

`run_child` is every child's process target: it ignores SIGINT (the parent orchestrates
shutdown), sets ``TF_FORCE_GPU_ALLOW_GROWTH`` and, for CPU-only children,
``CUDA_VISIBLE_DEVICES=-1`` before any TensorFlow import, imports TensorFlow only when the
child needs it (then enables GPU memory growth before its first op), seeds, and sends any
exception's traceback to the parent before exiting with code 1. `actor_main` and
`learner_main` build their runner on the channels of `r2d2_agent.channels`, and report
progress in the shared `RunCounters` and on their event pipe.

Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from r2d2_agent.channels import (
    AttachedWeightsPublisher,
    PipeExperienceReceiver,
    PipeExperienceSender,
    RunCounters,
    SharedFlag,
)
from r2d2_agent.config import R2D2Config
from r2d2_agent.runners import ActorRunner, LearnerRunner
from r2d2_agent.transport import SharedWeightsSubscriber
from r2d2_agent.weights import SharedWeightsHandle, WeightsSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChildOptions:
    """How `run_child` prepares a child before its main function.

    Attributes:
        role: "learner" or "actor".
        index: actor index (None for the learner).
        use_tensorflow: import TensorFlow (and enable GPU memory growth) up front.
        hide_gpu: set ``CUDA_VISIBLE_DEVICES=-1`` so the child never touches a GPU.
        seed: seeds Python's, numpy's (and TensorFlow's) global generators.
        log_level: level of the child's root logger, if it has no handler yet.
    """

    role: str
    index: int | None = None
    use_tensorflow: bool = False
    hide_gpu: bool = False
    seed: int | None = None
    log_level: int = logging.WARNING


def bootstrap(options: ChildOptions) -> None:
    """Prepares this process as described by `options` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # covers late TF imports
    if options.hide_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    if not logging.getLogger().handlers:
        logging.basicConfig(level=options.log_level,
                            format="%(asctime)s %(processName)s %(levelname)s %(name)s: "
                                   "%(message)s")
    if options.seed is not None:
        random.seed(options.seed)
        np.random.seed(options.seed % 2**32)
    if options.use_tensorflow:
        from r2d2_agent import compat

        compat.enable_gpu_memory_growth()
        if options.seed is not None:
            compat.set_global_seed(options.seed)


def run_child(main: Callable[..., None], options: ChildOptions, events: Connection,
              *args: Any) -> None:
    """Process target: `bootstrap`, then ``main(events, *args)``; errors go to `events`."""
    try:
        bootstrap(options)
        main(events, *args)
    except BaseException:
        text = traceback.format_exc()
        logger.error("%s %s failed:\n%s", options.role, options.index, text)
        try:
            events.send(("error", text))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        events.close()


class _ParentWatch:
    """`stop` raised, or the manager died (this process was re-parented): checked cheaply."""

    def __init__(self, stop: SharedFlag, every: int = 256) -> None:
        self._stop, self._ppid, self._every, self._calls = stop, os.getppid(), every, 0

    def __call__(self) -> bool:
        self._calls += 1
        if self._calls % self._every == 0 and os.getppid() != self._ppid:
            logger.warning("the manager process is gone; stopping")
            self._stop.set()  # only this process's view matters: the manager is gone
        return self._stop.is_set()


class _ActorReporter:
    """`ActorProgress` writing the actor's counter slot and sending episode returns."""

    def __init__(self, counters: RunCounters, index: int, events: Connection) -> None:
        self._slot, self._index, self._events = counters.actor_steps, index, events
        self._base = int(self._slot[index])  # a restarted actor continues its count

    def on_steps(self, total_steps: int) -> None:
        self._slot[self._index] = self._base + total_steps

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        self._events.send(("episode", float(episode_return), int(episode_steps)))


class _LearnerReporter:
    """`LearnerProgress` writing the learner's counter slots."""

    def __init__(self, counters: RunCounters) -> None:
        self._counters = counters

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        slots = self._counters.learner
        slots[0], slots[1] = runner.updates, runner.sequences_received
        slots[2], slots[3] = runner.env_steps_received, runner.version
        if "loss" in runner.metrics:
            self._counters.loss.value = runner.metrics["loss"]


def actor_main(events: Connection, conn: Connection, stop: SharedFlag, counters: RunCounters,
               index: int, config: R2D2Config, payload: bytes,
               weights: SharedWeightsHandle, kwargs: dict[str, Any],
               nb_steps: int | None) -> None:
    """Actor process: builds env, policy and channels, then runs an `ActorRunner`.

    Args:
        payload: pickled ``(env_factory, image_model, callbacks, use_numpy_policy)``.
        kwargs: `ActorRunner` keyword arguments (epsilon, seed, ...).
        nb_steps: stop once all actors together took this many env steps.
    """
    from r2d2_agent.actor import make_policy

    env_factory, image_model, callbacks, use_numpy = pickle.loads(payload)
    policy = make_policy(config, image_model, use_numpy)
    env = env_factory()
    sender, subscriber = PipeExperienceSender(conn, stop), SharedWeightsSubscriber(weights)
    runner = ActorRunner(index, config, env, policy, sender, subscriber, callbacks=callbacks,
                         progress=_ActorReporter(counters, index, events), **kwargs)

    stopped = _ParentWatch(stop)

    def should_stop() -> bool:
        return stopped() or (nb_steps is not None and counters.total_steps() >= nb_steps)

    try:
        runner.run(should_stop)
    finally:
        env.close()
        subscriber.close()
        sender.close()
    events.send(("info", {"pid": os.getpid(), "policy": type(policy).__name__,
                          "tensorflow_loaded": "tensorflow" in sys.modules,
                          "steps": runner.steps, "weight_pulls": runner.weight_pulls,
                          "items_sent": runner.items_sent}))


def learner_main(events: Connection, control: Connection, stop: SharedFlag,
                 counters: RunCounters, config: R2D2Config, payload: bytes,
                 kwargs: dict[str, Any]) -> None:
    """Learner process: builds the learner, reports its weight spec, trains.

    Protocol: sends ``("spec", WeightsSpec)`` on `events`, waits for ``("weights",
    handle)`` on `control` (the manager creates and owns the segment), then runs a
    `LearnerRunner` whose receiver takes actor pipes from `control`.

    Args:
        payload: pickled ``(image_model, callbacks, initial_weights, observation_dtype)``.
        kwargs: `LearnerRunner` keyword arguments.
    """
    from r2d2_agent.learner import R2D2Learner

    image_model, callbacks, initial_weights, observation_dtype = pickle.loads(payload)
    learner = R2D2Learner(config, image_model, observation_dtype)
    if initial_weights is not None:
        learner.set_weights(initial_weights)
    events.send(("spec", WeightsSpec.from_arrays(learner.get_weights())))
    stopped = _ParentWatch(stop, every=1)
    while not control.poll(0.1):
        if stopped():
            return
    kind, handle = control.recv()
    if kind != "weights":
        raise RuntimeError(f"expected the weights handle first, got {kind!r}")
    publisher, receiver = AttachedWeightsPublisher(handle), PipeExperienceReceiver(control)
    runner = LearnerRunner(learner, receiver, publisher, callbacks=callbacks,
                           progress=_LearnerReporter(counters), **kwargs)
    try:
        runner.run(_ParentWatch(stop, every=16))
    finally:
        _LearnerReporter(counters).on_learner_progress(runner)
        receiver.close()
        publisher.close()
    events.send(("info", {"pid": os.getpid(), "updates": runner.updates,
                          "sequences": runner.sequences_received}))
