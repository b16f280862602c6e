"""`CheckpointCallback`: periodic, atomic checkpoints that resume a run, keeping the last K."""

from __future__ import annotations

import logging
import os
from typing import Any

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.checkpoints import checkpoint_name, prune_checkpoints, write_checkpoint
from r2d2_agent.leftovers import reclaim_temp_files

logger = logging.getLogger(__name__)

_FILE_SUFFIXES = (".h5", ".hdf5")


class CheckpointCallback(R2D2Callback):
    """Writes checkpoints every `interval` and at the end; loads weights at start if asked.

    A checkpoint holds the online and target weights, the optimizer state, the counters
    (env steps, learner updates, episodes, per actor) and the config, and with
    `save_replay=True` the replay memory: pass it (or its directory) to
    `R2D2Agent.fit(..., resume_from=...)` or `R2D2Manager.train(..., resume_from=...)` to
    continue the run. Each file is written to a temporary name, fsynced and renamed, so a
    crash never leaves a half-written one; the temp files of writers killed mid-save are
    removed when training begins and at every prune (never those of a live writer:
    `r2d2_agent.leftovers`).

    Works on an `R2D2Agent` (interval in env steps, written by `fit`) and on an
    `R2D2Manager` (interval in learner updates, written by the learner process).

    Args:
        filepath: A directory, which gets `ckpt-<N>.h5` files (N: learner updates for the
            manager, env steps for the agent) of which the last `keep` are kept; or a file
            ending in `.h5`, overwritten at every save.
        interval: Env steps (agent) or learner updates (manager) between saves.
        load_path: Weights (a `save_weights` file or a checkpoint) to load before training
            starts; None loads nothing. To continue a run, use `resume_from` instead.
        save_at_end: Also save when training ends.
        keep: Checkpoints kept in the directory (older ones are deleted after a save).
        save_replay: Also write the replay memory (sequences, sum-tree priorities,
            frames), so that a resumed run samples from it at once instead of refilling
            it. Off by default: the replay can take gigabytes (about
            `estimate_replay_bytes(config)`), every save writes all of it, and `keep`
            files hold `keep` copies. A checkpoint with a replay resumes only with the
            same `memory_capacity` (and the other fields that shape the replay).

    Raises:
        ValueError: If `interval` or `keep` is below 1.
    """

    def __init__(
        self,
        filepath: str | os.PathLike[str],
        interval: int = 10_000,
        load_path: str | os.PathLike[str] | None = None,
        save_at_end: bool = True,
        keep: int = 3,
        save_replay: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be an int >= 1, got {interval!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}")
        self.filepath = os.path.abspath(os.fspath(filepath))  # a Ray worker may have another cwd
        self.interval = interval
        self.load_path = None if load_path is None else os.fspath(load_path)
        self.save_at_end = save_at_end
        self.keep = keep
        self.save_replay = bool(save_replay)
        self.saves = 0
        """Checkpoints written by this copy of the callback (each process has its own)."""
        self.last_path: str | None = None
        """The file of the latest save."""

    @property
    def single_file(self) -> bool:
        """Whether `filepath` names one file (rewritten) rather than a directory."""
        return self.filepath.endswith(_FILE_SUFFIXES)

    def _reclaim(self) -> None:
        """Removes the temp files that killed writers left where this callback writes."""
        reclaim_temp_files(os.path.dirname(self.filepath) if self.single_file else self.filepath)

    def _save(self, learner: Any, number: int) -> None:
        if self.single_file:
            path = self.filepath
        else:
            path = os.path.join(self.filepath, checkpoint_name(number))
        # The replay's arrays are written as they are (no copy): nothing adds to the
        # replay while this runs.
        write_checkpoint(path, learner.save(replay=self.save_replay, copy_replay=False))
        if not self.single_file:
            prune_checkpoints(self.filepath, self.keep)
        self.saves += 1
        self.last_path = path
        logger.info("saved checkpoint %s", path)

    # Single-process agent (keras-rl hooks; self.model is the agent) ----------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        if getattr(self.model, "training", False):
            self._reclaim()
            if self.load_path is not None:
                self.model.load_weights(self.load_path)

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        agent = self.model
        if getattr(agent, "training", False) and agent.step % self.interval == 0:
            self._save(agent.learner, agent.step)

    def on_train_end(self, logs: dict | None = None) -> None:
        agent = self.model
        if self.save_at_end and getattr(agent, "training", False):
            self._save(agent.learner, agent.step)

    # Manager: runs in the learner process -------------------------------------------------
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        self._reclaim()
        if self.load_path is not None:
            learner.load_weights(self.load_path)

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0:
            self._save(learner, learner.updates)

    def on_r2d2_learner_end(self, learner: Any) -> None:
        if self.save_at_end:
            self._save(learner, learner.updates)
