"""Whether a checkpoint fits a configuration: the fields that shape the network must match.

The check compares the configuration stored in the checkpoint with the run's, field by
field, without TensorFlow, so the manager refuses an incompatible checkpoint in its parent
process, before any child starts. The learner checks every weight's shape again when it
restores (which also covers a different `ImageModel`).
"""

from __future__ import annotations

import json
from typing import Any

from r2d2_agent.checkpoints.state import IncompatibleCheckpointError, TrainingState
from r2d2_agent.config import R2D2Config

__all__ = ["NETWORK_FIELDS", "changed_fields", "check_compatible", "config_as_data"]

NETWORK_FIELDS = (
    "input_shape",
    "nb_actions",
    "input_type",
    "input_sequence",
    "lstm_units",
    "dense_units",
    "enable_dueling",
    "enable_prev_action_reward",
)
"""`R2D2Config` fields that change the network's weights: a checkpoint written with other
values cannot be loaded."""


def config_as_data(config: R2D2Config) -> dict[str, Any]:
    """`config.to_dict()` as a checkpoint stores it (JSON types: lists, not tuples)."""
    return json.loads(json.dumps(config.to_dict()))


def _differences(stored: dict[str, Any], config: R2D2Config, names: Any) -> dict:
    now = config_as_data(config)
    return {
        name: (stored.get(name), now.get(name))
        for name in names
        if name in now and stored.get(name) != now.get(name)
    }


def check_compatible(state: TrainingState, config: R2D2Config) -> None:
    """Raises unless `state` was written for a network of `config`'s shape.

    Raises:
        IncompatibleCheckpointError: Naming the file and every mismatching field (the
            value in the checkpoint and the value now).
    """
    mismatches = _differences(state.config, config, NETWORK_FIELDS)
    if mismatches:
        listed = "; ".join(
            f"{name}: {old!r} in the checkpoint, {new!r} in this config"
            for name, (old, new) in mismatches.items()
        )
        raise IncompatibleCheckpointError(
            state.path or "checkpoint",
            f"checkpoint {state.path} was written for another network ({listed}); resume "
            "with the config it was written with, or start a new run",
            mismatches,
        )


def changed_fields(state: TrainingState, config: R2D2Config) -> dict[str, tuple[Any, Any]]:
    """Fields (other than the network's) whose values differ from the checkpoint's, e.g.
    a new learning rate; resuming with them is allowed."""
    others = [name for name in config_as_data(config) if name not in NETWORK_FIELDS]
    return _differences(state.config, config, others)
