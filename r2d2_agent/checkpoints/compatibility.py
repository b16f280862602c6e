"""Whether a checkpoint fits a configuration: the fields that shape the network must match.

The check compares the configuration stored in the checkpoint with the run's, field by
field, without TensorFlow, so the manager refuses an incompatible checkpoint in its parent
process, before any child starts. The learner checks every weight's shape again when it
restores (which also covers a different `ImageModel`).

A checkpoint that holds the replay memory also needs the fields that shape the replay
(`REPLAY_FIELDS`) to match: the replay is restored as it was, so it must fit the configured
`memory_capacity` exactly (a replay is never cut down or spread out to another capacity).
The learner checks every replay array's shape and dtype again when it restores.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from r2d2_agent.checkpoints.errors import IncompatibleCheckpointError
from r2d2_agent.checkpoints.state import TrainingState
from r2d2_agent.config import R2D2Config

__all__ = [
    "NETWORK_FIELDS",
    "REPLAY_FIELDS",
    "changed_fields",
    "check_compatible",
    "check_replay_compatible",
    "config_as_data",
]

NETWORK_FIELDS = (
    "input_shape",
    "nb_actions",
    "input_type",
    "input_sequence",
    "lstm_units",
    "dense_units",
    "enable_dueling",
    "enable_prev_action_reward",
    "normalize_rewards",
)
"""`R2D2Config` fields that change the network's weights: a checkpoint written with other
values cannot be loaded (`normalize_rewards` adds the reward statistics to the weights,
and the Q-values of a network trained with it are in other units)."""


REPLAY_FIELDS = (
    "memory_capacity",
    "burnin",
    "input_length",
    "multisteps",
    "sequence_period",
    "priority_exponent",
    "frame_compression",
    "frame_compression_ratio",
)
"""`R2D2Config` fields (besides `NETWORK_FIELDS`) that shape the replay memory: a
checkpoint holding a replay can only be resumed with the values it was written with."""


def _replay_values(scalars: dict[str, Any], config: R2D2Config) -> dict[str, tuple[Any, Any]]:
    """Field -> (value the checkpoint's replay was built with, value in `config`)."""
    compression = scalars.get("compression") or None
    values = {
        "memory_capacity": (scalars.get("capacity"), config.memory_capacity),
        "burnin": (scalars.get("layout.burnin"), config.burnin),
        "input_length": (scalars.get("layout.input_length"), config.input_length),
        "multisteps": (scalars.get("layout.multisteps"), config.multisteps),
        "sequence_period": (scalars.get("layout.period"), config.period),
        "priority_exponent": (scalars.get("priority_exponent"), config.priority_exponent),
        "frame_compression": (compression, config.frame_compression),
    }
    if compression is not None and config.frame_compression is not None:
        ratio = (scalars.get("compression_ratio"), config.frame_compression_ratio)
        values["frame_compression_ratio"] = ratio
    return values


def check_replay_compatible(state: TrainingState, config: R2D2Config) -> None:
    """Raises unless the replay memory in `state` (if any) fits a replay of `config`.

    Raises:
        IncompatibleCheckpointError: Naming the file and every mismatching field of
            `REPLAY_FIELDS` (the replay's value and the config's).
    """
    if state.replay is None:
        return
    values = _replay_values(dict(state.replay.scalars), config)
    mismatches = {name: pair for name, pair in values.items() if pair[0] != pair[1]}
    if mismatches:
        listed = _listed(mismatches, "the checkpoint's replay")
        raise IncompatibleCheckpointError(
            state.path or "checkpoint",
            f"checkpoint {state.path} holds a replay memory of {state.replay.size} sequences "
            f"that does not fit this config ({listed}); resume with the settings it was "
            "written with, or from a checkpoint without the replay (CheckpointCallback's "
            "save_replay=False)",
            mismatches,
        )


def _listed(mismatches: dict[str, tuple[Any, Any]], where: str) -> str:
    """`"name: old in <where>, new in this config; ..."` for an error message."""
    return "; ".join(
        f"{name}: {old!r} in {where}, {new!r} in this config"
        for name, (old, new) in mismatches.items()
    )


def config_as_data(config: R2D2Config) -> dict[str, Any]:
    """`config.to_dict()` as a checkpoint stores it (JSON types: lists, not tuples)."""
    return json.loads(json.dumps(config.to_dict()))


def _differences(stored: dict[str, Any], config: R2D2Config, names: Any) -> dict:
    """Field -> (stored value, value now) where they differ; a field the stored config
    lacks (written before the field existed) counts as its default."""
    now = config_as_data(config)
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(R2D2Config)
        if f.default is not dataclasses.MISSING
    }
    out = {}
    for name in names:
        if name not in now:
            continue
        old = stored.get(name, defaults.get(name))
        if old != now.get(name):
            out[name] = (old, now.get(name))
    return out


def check_compatible(state: TrainingState, config: R2D2Config, replay: bool = True) -> None:
    """Raises unless `state` was written for a network of `config`'s shape (and, with
    `replay`, unless its replay memory, if it holds one, fits `config`'s replay).

    Args:
        state: A checkpoint's state.
        config: The run's configuration.
        replay: Also check the replay memory (`check_replay_compatible`); False when only
            the weights are used.

    Raises:
        IncompatibleCheckpointError: Naming the file and every mismatching field (the
            value in the checkpoint and the value now).
    """
    mismatches = _differences(state.config, config, NETWORK_FIELDS)
    if mismatches:
        listed = _listed(mismatches, "the checkpoint")
        raise IncompatibleCheckpointError(
            state.path or "checkpoint",
            f"checkpoint {state.path} was written for another network ({listed}); resume "
            "with the config it was written with, or start a new run",
            mismatches,
        )
    if replay:
        check_replay_compatible(state, config)


def changed_fields(state: TrainingState, config: R2D2Config) -> dict[str, tuple[Any, Any]]:
    """Fields (other than the network's) whose values differ from the checkpoint's, e.g.
    a new learning rate; resuming with them is allowed."""
    others = [name for name in config_as_data(config) if name not in NETWORK_FIELDS]
    return _differences(state.config, config, others)
