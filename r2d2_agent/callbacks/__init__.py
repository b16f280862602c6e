"""Callbacks: `R2D2Callback` hooks plus ready-made save/load and logging callbacks."""

from r2d2_agent.callbacks.base import R2D2Callback

__all__ = ["R2D2Callback"]
