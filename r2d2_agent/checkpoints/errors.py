"""The errors of checkpoints: each names the file and what is wrong."""

from __future__ import annotations

from typing import Any

__all__ = [
    "CheckpointError",
    "CorruptCheckpointError",
    "IncompatibleCheckpointError",
    "MissingCheckpointError",
    "WeightsFileError",
]


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message names the file and what is wrong.

    Attributes:
        path: The checkpoint file or directory.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist, or a directory holds no checkpoint."""


class CorruptCheckpointError(CheckpointError, OSError):
    """The file is truncated, corrupted or not an r2d2-agent checkpoint."""


class IncompatibleCheckpointError(CheckpointError, ValueError):
    """The checkpoint was written for a network of another shape.

    Attributes:
        mismatches: Field name -> (value in the checkpoint, value now).
    """

    def __init__(
        self, path: str, message: str, mismatches: dict[str, tuple[Any, Any]] | None = None
    ) -> None:
        super().__init__(path, message)
        self.mismatches = dict(mismatches or {})


class WeightsFileError(CheckpointError, ValueError):
    """The file is a weights file (`save_weights`, Keras's HDF5 weights), not a checkpoint:
    it loads with `load_weights`, but a run cannot resume from it (it holds no optimizer
    state, counters or replay)."""
