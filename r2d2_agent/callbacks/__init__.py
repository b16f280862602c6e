"""Callbacks: `R2D2Callback` hooks plus ready-made save/load and logging callbacks."""

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.callbacks.checkpoint import CheckpointCallback
from r2d2_agent.callbacks.tensorboard import TensorBoardCallback

__all__ = ["R2D2Callback", "CheckpointCallback", "TensorBoardCallback"]
