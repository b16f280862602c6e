"""r2d2-agent: R2D2 (Recurrent Replay Distributed DQN) for keras-rl2, TensorFlow and Gymnasium.

Public names: `R2D2Config`, `InputType`, `R2D2Agent`, `R2D2Manager` (and what the manager
returns or raises: `TrainResult`, `Progress`, `R2D2ProcessError`). `R2D2Config`,
`InputType` and the manager import without TensorFlow, so a manager can check its inputs
and start its child processes before any TensorFlow is loaded; `R2D2Agent` (and
everything that needs TensorFlow) is imported on first use.

Subpackages, bottom to top: `config`/`compat`, `math`, `networks` and `image_models`,
`replay`, `envs`, `checkpoints` (resumable checkpoint files), `runlog` (run-directory
logs), `roles` (actor, learner, builder, episode loop) and `plot` (`python -m
r2d2_agent.plot RUN_DIR`), `keras_rl` (the agent) and `callbacks`, `distributed` (the
manager). See `docs/architecture.md`.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2_agent.config import InputType, R2D2Config

__version__ = "0.2.0"

_LAZY = {
    "R2D2Agent": "r2d2_agent.keras_rl.agent",
    "R2D2Manager": "r2d2_agent.distributed",
    "R2D2ProcessError": "r2d2_agent.distributed",
    "Progress": "r2d2_agent.distributed",
    "TrainResult": "r2d2_agent.distributed",
    "R2D2Learner": "r2d2_agent.roles.learner",
    "R2D2Actor": "r2d2_agent.roles.actor",
    "R2D2Builder": "r2d2_agent.roles.builder",
}

__all__ = ["InputType", "R2D2Config", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent' has no attribute {name!r}")
