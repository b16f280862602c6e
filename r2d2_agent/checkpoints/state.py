"""What a checkpoint holds.

A `TrainingState` is everything a learner needs to continue where a run stopped: the
online and target weights, the optimizer's state (Adam's iteration count and slots), the
run's `TrainingCounters`, the configuration it was written with and the library version,
and optionally the replay memory (`ReplaySnapshot`). Arrays are numpy arrays, so a state
crosses process boundaries (inside `LearnerStart`) without TensorFlow; a replay read from
a file stays in the file until `ReplaySnapshot.load`, so only its summary travels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from r2d2_agent.checkpoints.h5format import load_replay, stored_replay

__all__ = [
    "ReplaySnapshot",
    "TrainingCounters",
    "TrainingState",
    "spread_counts",
]


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
class ReplaySnapshot:
    """A replay memory in a checkpoint: `SequenceReplay.export_state()`, split in two.

    Made from a live replay (`from_state`, what `R2D2Learner.save(replay=True)` does), it
    holds the arrays; read from a file (`read_checkpoint`), it holds only the scalars and
    reads the arrays from `path` when `load` is called, so a state handed to a child
    process does not carry gigabytes of frames.

    Attributes:
        scalars: The plain values (ints, floats, strs): sizes, cursors, layout, format.
        arrays: Name -> numpy array, or None while they are still in the file `path`.
        path: The checkpoint file holding the arrays (None for an in-memory snapshot).
        nbytes: Bytes of the arrays.
    """

    scalars: Mapping[str, Any]
    arrays: Mapping[str, np.ndarray] | None = field(default=None, repr=False)
    path: str | None = None
    nbytes: int = 0

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ReplaySnapshot:
        """Splits an exported replay state into scalars and arrays.

        Raises:
            ValueError: On a value that is neither a numpy array nor an int, float or str
                (such a state could not be written without pickle).
        """
        scalars: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        for name, value in state.items():
            if isinstance(value, np.ndarray):
                if value.dtype.hasobject:
                    raise ValueError(f"replay state {name!r} is an object array")
                arrays[name] = value
            elif isinstance(value, (bool, np.bool_)):
                scalars[name] = bool(value)
            elif isinstance(value, (int, np.integer)):
                scalars[name] = int(value)
            elif isinstance(value, (float, np.floating)):
                scalars[name] = float(value)
            elif isinstance(value, str):
                scalars[name] = value
            else:
                raise ValueError(
                    f"replay state {name!r} is a {type(value).__name__}; only numpy arrays, "
                    "ints, floats and strs go into a checkpoint"
                )
        nbytes = sum(int(a.nbytes) for a in arrays.values())
        return cls(scalars=scalars, arrays=arrays, path=None, nbytes=nbytes)

    @property
    def capacity(self) -> int:
        """Sequences the replay held at most (its `memory_capacity`)."""
        return int(self.scalars.get("capacity", 0))

    @property
    def size(self) -> int:
        """Sequences it held that can be sampled."""
        return int(self.scalars.get("size", 0))

    def load(self) -> dict[str, Any]:
        """The exported state, arrays included (`SequenceReplay.restore_state` takes it);
        read from `path` (checksums checked) when not in memory.

        Raises:
            MissingCheckpointError: If the file is gone.
            CorruptCheckpointError: If it no longer holds the replay, or a checksum fails.
        """
        if self.arrays is not None:
            return {**self.scalars, **self.arrays}
        return load_replay(self._file())

    def state(self) -> dict[str, Any]:
        """The exported state for `SequenceReplay.restore_state`, the arrays of a
        snapshot read from a file left in it (`StoredDataset`s: the replay reads them a
        slice at a time straight into its own arrays, checksums checked, so restoring
        holds the replay once, not twice); an in-memory snapshot's as they are.

        Raises:
            MissingCheckpointError: If the file is gone.
            CorruptCheckpointError: If it no longer holds the replay, or is damaged.
        """
        if self.arrays is not None:
            return {**self.scalars, **self.arrays}
        return stored_replay(self._file())

    def _file(self) -> str:
        if self.path is None:
            raise ValueError("this ReplaySnapshot holds no arrays and names no file")
        return self.path


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
        replay: The replay memory, if the checkpoint holds it (None: the replay refills).
        average_weights: The greedy policy's moving average of the online weights, same
            order, written by a learner with `policy_average_updates` (None otherwise).
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
    replay: ReplaySnapshot | None = field(default=None, compare=False)
    average_weights: list[np.ndarray] | None = None

    @property
    def policy_weights(self) -> list[np.ndarray]:
        """The greedy policy's weights: `average_weights` if it holds them, else the
        online weights (what `R2D2Learner.load_weights` loads)."""
        return self.online_weights if self.average_weights is None else self.average_weights

    def with_weights(self, weights: list[np.ndarray]) -> TrainingState:
        """This state with `weights` as its online and target weights (and average, if it
        holds one) and no replay (e.g. the weights of a run's best evaluation in its last
        checkpoint's frame).

        Args:
            weights: The network's weights, in `online_weights` order.

        Raises:
            ValueError: If their number or a shape differs from `online_weights`' (the
                message names the variable).
        """
        if len(weights) != len(self.online_weights):
            raise ValueError(
                f"{len(weights)} weight arrays for a network of {len(self.online_weights)}"
            )
        arrays = [np.array(w, copy=True) for w in weights]
        for name, new, old in zip(self.weight_names, arrays, self.online_weights, strict=True):
            if new.shape != old.shape:
                raise ValueError(f"weight {name}: shape {new.shape}, the network's {old.shape}")
        average = None if self.average_weights is None else list(arrays)
        return replace(
            self,
            online_weights=arrays,
            target_weights=list(arrays),
            average_weights=average,
            path=None,
            replay=None,
        )

    def describe(self) -> str:
        """One line for logs: file, updates, env steps, episodes (and the replay's size)."""
        c = self.counters
        replay = "" if self.replay is None else f", a replay of {self.replay.size} sequences"
        return (
            f"{self.path or 'checkpoint'} ({c.learner_updates} learner updates, "
            f"{c.env_steps} env steps, {c.episodes} episodes{replay})"
        )
