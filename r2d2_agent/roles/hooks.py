"""Calling `R2D2Callback` hooks on duck-typed callbacks, in any process; binding the way a
callback ends the run (`R2D2Callback.request_stop`) and logs a metric of its own
(`R2D2Callback.log_metric`); naming the keras-rl hooks a manager run would skip.

Used by the single-process agent's `fit`/`test` and by the distributed loops and backends.
"""

from __future__ import annotations

import logging
import numbers
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KERAS_RL_HOOKS",
    "MetricLogger",
    "MetricRecord",
    "bind_metric_logger",
    "bind_stop_requester",
    "call_hooks",
    "skipped_keras_rl_hooks",
    "warn_skipped_keras_rl_hooks",
]

KERAS_RL_HOOKS: dict[str, tuple[str, ...]] = {
    "on_train_begin": ("on_r2d2_train_begin", "on_r2d2_learner_begin", "on_r2d2_actor_begin"),
    "on_train_end": ("on_r2d2_train_end", "on_r2d2_learner_end", "on_r2d2_actor_end"),
    "on_episode_begin": ("on_r2d2_actor_episode_end",),
    "on_episode_end": ("on_r2d2_actor_episode_end",),
    "on_step_begin": ("on_r2d2_learner_train_begin",),
    "on_step_end": ("on_r2d2_learner_train_end", "on_r2d2_actor_episode_end"),
    "on_action_begin": (),
    "on_action_end": (),
}
"""keras-rl's hooks, which only `R2D2Agent.fit`/`test` run, and the manager hooks a
manager run has in their place (a callback that implements one of those handles the
manager itself)."""

_INSTEAD = {
    "on_r2d2_train_begin": "on_r2d2_train_begin() (the parent)",
    "on_r2d2_learner_begin": "on_r2d2_learner_begin(learner) (the learner)",
    "on_r2d2_actor_begin": "on_r2d2_actor_begin(actor_index, runner) (each actor)",
    "on_r2d2_train_end": "on_r2d2_train_end() (the parent)",
    "on_r2d2_learner_end": "on_r2d2_learner_end(learner) (the learner)",
    "on_r2d2_actor_end": "on_r2d2_actor_end(actor_index, runner) (each actor)",
    "on_r2d2_actor_episode_end": (
        "on_r2d2_actor_episode_end(actor_index, runner, episode) (each actor, per episode)"
    ),
    "on_r2d2_learner_train_begin": "on_r2d2_learner_train_begin(learner) (per learner update)",
    "on_r2d2_learner_train_end": "on_r2d2_learner_train_end(learner) (per learner update)",
}

_BASE_MODULES = ("r2d2_agent.callbacks.", "rl.", "tensorflow.", "tf_keras.", "keras.")


def call_hooks(callbacks: Sequence[Any], name: str, *args: Any) -> None:
    """Calls hook `name` with `args` on every callback that has it.

    Callbacks need not subclass `R2D2Callback`: any object with the hook's method works.
    """
    for callback in callbacks:
        hook = getattr(callback, name, None)
        if hook is not None:
            hook(*args)


def bind_stop_requester(callbacks: Sequence[Any], requester: Any) -> None:
    """Gives every callback that can request a stop (`R2D2Callback.request_stop`: any
    object with `set_stop_requester`) this process's way to end the run; None unbinds.

    Args:
        callbacks: The callbacks of this process.
        requester: `requester(reason)` asks the run to stop (in a child: a
            `StopRequested` event to the parent).
    """
    for callback in callbacks:
        bind = getattr(callback, "set_stop_requester", None)
        if bind is not None:
            bind(requester)


@dataclass(frozen=True)
class MetricRecord:
    """One value of a custom metric (`R2D2Callback.log_metric`), as the sinks get it.

    Attributes:
        name: The metric's name (TensorBoard shows it as `custom/<name>`).
        value: The value.
        process: Who logged it: "agent", "parent", "learner" or "actor-<i>".
        env_steps: The run's env steps (all actors) when it was logged; None if unknown.
        updates: Learner updates when it was logged (None in actors).
        time: Unix time.
    """

    name: str
    value: float
    process: str
    env_steps: int | None
    updates: int | None
    time: float


class MetricLogger:
    """A process's custom metrics: `logger(name, value)` stamps the value with the process
    and its counters and hands the `MetricRecord` to every callback that writes metrics
    (`on_r2d2_metric(record)`: `RunLogCallback`, `TensorBoardCallback`, or your own).

    Args:
        callbacks: The callbacks of this process.
        process: Its name in the records ("agent", "parent", "learner", "actor-<i>").
        counters: Returns (the run's env steps, learner updates) now; either may be None.
    """

    def __init__(
        self,
        callbacks: Sequence[Any],
        process: str,
        counters: Callable[[], tuple[int | None, int | None]],
    ) -> None:
        self.callbacks = tuple(callbacks)
        self.process = process
        self.counters = counters
        self._warned = False

    @property
    def has_sinks(self) -> bool:
        """Whether a callback of this process writes metrics (`on_r2d2_metric`)."""
        return any(callable(getattr(c, "on_r2d2_metric", None)) for c in self.callbacks)

    def __call__(self, name: str, value: Any) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a metric name must be a non-empty string, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"metric {name!r} must be a real number, got {value!r}")
        sinks = [c for c in self.callbacks if callable(getattr(c, "on_r2d2_metric", None))]
        if not sinks:
            if not self._warned:
                self._warned = True
                logging.getLogger(__name__).warning(
                    "metric %r logged in %s goes nowhere: attach a RunLogCallback or a "
                    "TensorBoardCallback to write custom metrics",
                    name,
                    self.process,
                )
            return
        env_steps, updates = self.counters()
        record = MetricRecord(
            name=name,
            value=float(value),
            process=self.process,
            env_steps=None if env_steps is None else int(env_steps),
            updates=None if updates is None else int(updates),
            time=time.time(),
        )
        for sink in sinks:
            sink.on_r2d2_metric(record)


def bind_metric_logger(callbacks: Sequence[Any], metric_logger: MetricLogger | None) -> None:
    """Gives every callback that can log metrics (`R2D2Callback.log_metric`: any object
    with `set_metric_logger`) this process's `MetricLogger`; None unbinds."""
    for callback in callbacks:
        bind = getattr(callback, "set_metric_logger", None)
        if bind is not None:
            bind(metric_logger)


def _implements(callback: Any, name: str) -> bool:
    """Whether `callback` has hook `name` of its own: not the no-op default of
    `R2D2Callback` or of keras-rl's (Keras's) `Callback` base."""
    if not callable(getattr(callback, name, None)):
        return False
    for cls in type(callback).__mro__:
        if name in vars(cls):
            is_base = cls.__name__ in ("R2D2Callback", "Callback") and cls.__module__.startswith(
                _BASE_MODULES
            )
            return not is_base
    return True  # set on the instance


def skipped_keras_rl_hooks(callback: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The keras-rl hooks `callback` implements that a manager run would not call (the
    callback implements none of the manager hooks in their place), each with those hooks.
    """
    return [
        (hook, instead)
        for hook, instead in KERAS_RL_HOOKS.items()
        if _implements(callback, hook) and not any(_implements(callback, h) for h in instead)
    ]


def warn_skipped_keras_rl_hooks(callbacks: Sequence[Any], stacklevel: int = 2) -> None:
    """Warns once per callback about the keras-rl hooks a manager run will not call,
    naming each and the `on_r2d2_*` hooks to use instead.

    Args:
        callbacks: The manager's callbacks.
        stacklevel: As for `warnings.warn`, counted from the caller of this function.
    """
    for callback in callbacks:
        skipped = skipped_keras_rl_hooks(callback)
        if not skipped:
            continue
        name = type(callback).__name__
        lines = []
        for hook, instead in skipped:
            use = " or ".join(_INSTEAD[h] for h in instead) if instead else "no manager hook"
            lines.append(f"{name}.{hook}: use {use}")
        warnings.warn(
            f"R2D2Manager will not call these hooks of {name} (keras-rl's hooks run in "
            "R2D2Agent.fit/test only): " + "; ".join(lines),
            UserWarning,
            stacklevel=stacklevel + 1,
        )
