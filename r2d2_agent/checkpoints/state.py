"""What a checkpoint holds, and the errors reading one raises.

A `TrainingState` is everything a learner needs to continue where a run stopped: the
online and target weights, the optimizer's state (Adam's iteration count and slots), the
run's `TrainingCounters`, the configuration it was written with and the library version.
Arrays are numpy arrays, so a state crosses process boundaries (inside `LearnerStart`)
without TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CheckpointError",
    "CorruptCheckpointError",
    "IncompatibleCheckpointError",
    "MissingCheckpointError",
    "TrainingCounters",
    "TrainingState",
    "spread_counts",
]


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message names the file and what is wrong.

    Attributes:
        path: The checkpoint file or directory.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist, or a directory holds no checkpoint."""


class CorruptCheckpointError(CheckpointError, OSError):
    """The file is truncated, corrupted or not an r2d2-agent checkpoint."""


class IncompatibleCheckpointError(CheckpointError, ValueError):
    """The checkpoint was written for a network of another shape.

    Attributes:
        mismatches: Field name -> (value in the checkpoint, value now).
    """

    def __init__(
        self, path: str, message: str, mismatches: dict[str, tuple[Any, Any]] | None = None
    ) -> None:
        super().__init__(path, message)
        self.mismatches = dict(mismatches or {})


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TrainingCounters:
    """How far a run got; all plain Python ints.

    Attributes:
        env_steps: Env steps over all actors (the single-process agent: its own).
        learner_updates: Learner updates (gradient steps).
        episodes: Finished training episodes over all actors.
        sequences_received: Sequences the learner added to its replay.
        actor_env_steps: Env steps per actor index (one entry for the agent).
        actor_episodes: Finished episodes per actor index.

    Raises:
        ValueError: On a negative or non-integer count.
    """

    env_steps: int = 0
    learner_updates: int = 0
    episodes: int = 0
    sequences_received: int = 0
    actor_env_steps: tuple[int, ...] = ()
    actor_episodes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("env_steps", "learner_updates", "episodes", "sequences_received"):
            object.__setattr__(self, name, _check_count(name, getattr(self, name)))
        for name in ("actor_env_steps", "actor_episodes"):
            values = tuple(_check_count(name, v) for v in getattr(self, name))
            object.__setattr__(self, name, values)

    def env_steps_per_actor(self, nb_actors: int) -> list[int]:
        """`actor_env_steps` for a run of `nb_actors` actors (see `spread_counts`)."""
        return spread_counts(self.actor_env_steps, self.env_steps, nb_actors)

    def episodes_per_actor(self, nb_actors: int) -> list[int]:
        """`actor_episodes` for a run of `nb_actors` actors (see `spread_counts`)."""
        return spread_counts(self.actor_episodes, self.episodes, nb_actors)


def spread_counts(per_actor: tuple[int, ...], total: int, nb_actors: int) -> list[int]:
    """Per-actor counts of a checkpoint for a run with `nb_actors` actors; the sum is kept.

    Actor i keeps its own count; the counts of actors the new run does not have go to
    actor `i % nb_actors`; a total not covered by per-actor counts goes to actor 0.

    Args:
        per_actor: The checkpoint's counts per actor index.
        total: The checkpoint's total.
        nb_actors: Actors of the new run (>= 1).
    """
    counts = [0] * nb_actors
    for i, value in enumerate(per_actor):
        counts[i % nb_actors] += int(value)
    counts[0] += max(0, int(total) - sum(counts))
    return counts


@dataclass(frozen=True)
class TrainingState:
    """The contents of one checkpoint.

    Attributes:
        online_weights: The online network's weights (Keras `get_weights()` order).
        target_weights: The target network's weights, same order.
        weight_names: Names of the network's variables, same order (to report a mismatch).
        optimizer_weights: The optimizer's variables (`optimizer.variables` order: for
            Adam the iteration count, then first and second moments per variable).
        optimizer_names: Names of those variables (to report a mismatch).
        counters: How far the run got.
        config: The `R2D2Config` it was written with, as plain data
            (`R2D2Config.to_dict()`).
        library_version: The r2d2-agent version that wrote it.
        path: The file it was read from (None if not read from a file).
    """

    online_weights: list[np.ndarray]
    target_weights: list[np.ndarray]
    optimizer_weights: list[np.ndarray]
    weight_names: tuple[str, ...]
    optimizer_names: tuple[str, ...]
    counters: TrainingCounters
    config: dict[str, Any]
    library_version: str
    path: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        """One line for logs: file, updates, env steps, episodes."""
        c = self.counters
        return (
            f"{self.path or 'checkpoint'} ({c.learner_updates} learner updates, "
            f"{c.env_steps} env steps, {c.episodes} episodes)"
        )
