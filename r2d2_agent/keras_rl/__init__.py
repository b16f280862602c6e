"""The keras-rl face: `R2D2Agent` (an `rl.core.Agent`), its `fit`/`test` loop under
keras-rl's callback protocol, and the benchmark protocol `train_until_solved`.

The env adapter (`r2d2_agent.envs.GymnasiumEnv`) and the callbacks
(`r2d2_agent.callbacks`) complete it. `R2D2Agent` imports TensorFlow; it loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2_agent.keras_rl.evaluation import train_until_solved

__all__ = ["R2D2Agent", "train_until_solved"]


def __getattr__(name: str) -> Any:
    if name == "R2D2Agent":
        value = importlib.import_module("r2d2_agent.keras_rl.agent").R2D2Agent
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent.keras_rl' has no attribute {name!r}")
