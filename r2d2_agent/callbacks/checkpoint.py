"""`CheckpointCallback`: periodic, atomic HDF5 checkpoints, and loading at start."""

from __future__ import annotations

import logging
import os
from typing import Any

from r2d2_agent.callbacks.base import R2D2Callback

logger = logging.getLogger(__name__)


class CheckpointCallback(R2D2Callback):
    """Saves the online weights every `interval` and loads them at start if asked.

    Works on an `R2D2Agent` (interval in env steps, counted by `fit`) and on an
    `R2D2Manager` (interval in learner updates, saved by the learner process). Files are
    written to a temporary name and renamed, so a crash never leaves a half-written file.

    Args:
        filepath: HDF5 file to write.
        interval: Env steps (agent) or learner updates (manager) between saves.
        load_path: Weights to load before training starts; None loads nothing.
        save_at_end: Also save when training ends.
    """

    def __init__(
        self,
        filepath: str,
        interval: int = 10_000,
        load_path: str | None = None,
        save_at_end: bool = True,
    ) -> None:
        super().__init__()
        if interval < 1:
            raise ValueError(f"interval must be >= 1, got {interval!r}")
        self.filepath = os.fspath(filepath)
        self.interval = int(interval)
        self.load_path = None if load_path is None else os.fspath(load_path)
        self.save_at_end = save_at_end
        self.saves = 0

    def _save(self, keras_model: Any) -> None:
        from r2d2_agent.networks.weights_io import save_weights_atomic

        save_weights_atomic(keras_model, self.filepath, overwrite=True)
        self.saves += 1
        logger.info("saved weights to %s", self.filepath)

    # Single-process agent (keras-rl hooks; self.model is the agent) ----------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.load_path is not None and getattr(self.model, "training", False):
            self.model.load_weights(self.load_path)

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        if getattr(self.model, "training", False) and self.model.step % self.interval == 0:
            self._save(self.model.model)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.save_at_end and getattr(self.model, "training", False):
            self._save(self.model.model)

    # Manager: runs in the learner process -------------------------------------------------
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        if self.load_path is not None:
            learner.online.model.load_weights(self.load_path)
            learner.update_target()

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0:
            self._save(learner.online.model)

    def on_r2d2_learner_end(self, learner: Any) -> None:
        if self.save_at_end:
            self._save(learner.online.model)
