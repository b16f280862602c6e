"""Network weights to HDF5 files, written atomically, and the parts of the weights a
learner publishes (no TensorFlow here: actors and the parent use `split_published`)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from r2d2_agent.leftovers import atomic_write

__all__ = ["save_weights_atomic", "split_published"]


def save_weights_atomic(model: Any, filepath: str | os.PathLike[str], overwrite: bool) -> None:
    """Writes a Keras model's weights to HDF5 through a temporary file and an atomic rename.

    A crash while writing leaves either the previous file or none, never a half-written one
    (`r2d2_agent.leftovers.atomic_write`: the temp file `.<name>.<owner tag>.tmp` of a
    killed writer is removed by the next write of the file or by `r2d2-leftovers`).

    Args:
        model: A Keras model.
        filepath: The HDF5 file to write.
        overwrite: Replace an existing file.

    Raises:
        FileExistsError: If `filepath` exists and `overwrite` is False.
    """
    filepath = os.fspath(filepath)
    if os.path.exists(filepath) and not overwrite:
        raise FileExistsError(f"{filepath} exists; pass overwrite=True to replace it")
    with atomic_write(filepath, durable=True) as tmp:
        model.save_weights(tmp, save_format="h5")  # the format is given, not the suffix's


def split_published(
    arrays: list[np.ndarray], averaged: bool
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The two parts of a learner's published weights (`get_published_weights`).

    Args:
        arrays: The published arrays.
        averaged: Whether the learner averages its policy (`policy_average_updates` > 0).

    Returns:
        `(acting, policy)`: the online weights actors explore with, and the greedy
        policy's (the same list without averaging).
    """
    if not averaged:
        return arrays, arrays
    half = len(arrays) // 2
    return arrays[:half], arrays[half:]
