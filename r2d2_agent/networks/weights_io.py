"""Network weights to and from HDF5 files, written atomically."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["save_weights_atomic"]


def save_weights_atomic(model: Any, filepath: str | os.PathLike[str], overwrite: bool) -> None:
    """Writes a Keras model's weights to HDF5 through a temporary file and an atomic rename.

    A crash while writing leaves either the previous file or none, never a half-written one.

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
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(filepath)}.{os.getpid()}.tmp.h5")
    try:
        model.save_weights(tmp, save_format="h5")
        os.replace(tmp, filepath)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
