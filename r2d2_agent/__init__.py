"""r2d2-agent: R2D2 (Recurrent Replay Distributed DQN) for keras-rl2, TensorFlow and Gymnasium.

`R2D2Config`, `InputType` and `R2D2Manager` import without TensorFlow, so a manager can
check its inputs and start its child processes before any TensorFlow is loaded.
`R2D2Agent` (and everything that needs TensorFlow) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2_agent.config import InputType, R2D2Config

__version__ = "0.1.0"

_LAZY = {
    "R2D2Agent": "r2d2_agent.agent",
    "R2D2Manager": "r2d2_agent.manager",
    "R2D2Learner": "r2d2_agent.learner",
    "R2D2Actor": "r2d2_agent.actor",
}

__all__ = ["InputType", "R2D2Config", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent' has no attribute {name!r}")
