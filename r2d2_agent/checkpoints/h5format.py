"""The checkpoint file's format, shared by writing and reading (h5py, no TensorFlow).

Names and marks of the format, the CRC-32 of arrays, opening a file with an error that
names it, attributes as plain values, and reading the replay group (`load_replay`, which
`ReplaySnapshot.load` calls). The layout itself is described in `h5file`.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import h5py
import numpy as np

from r2d2_agent.checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    MissingCheckpointError,
)

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "load_replay"]

FORMAT_NAME = "r2d2-agent checkpoint"
FORMAT_VERSION = 1

WHAT_TO_DO = (
    "Resume from an earlier checkpoint (CheckpointCallback keeps the last few in the same "
    "directory) or start without resume_from."
)
REPLAY_DATASETS = "datasets"  # attr of /replay: the JSON list of its datasets
_CRC_CHUNK_BYTES = 64 << 20  # checksums of replay datasets are computed this much at a time


def crc32(array: np.ndarray, value: int = 0) -> int:
    """CRC-32 of an array's bytes in C order (that of `array.tobytes()`), without a copy
    when the array is contiguous."""
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8), value)


WEIGHTS_WHAT_TO_DO = (
    "If it is still being written or copied, wait until it is complete; otherwise load an "
    "earlier file (save_weights and CheckpointCallback write through a temporary file and a "
    "rename, so their own files are never half-written)."
)


def open_file(path: str, what_to_do: str = WHAT_TO_DO) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise CorruptCheckpointError(
            path,
            f"{path} cannot be read: it is truncated or corrupted, or not an HDF5 file "
            f"(h5py: {exc}). {what_to_do}",
        ) from exc


def plain(value: Any) -> Any:
    """An HDF5 attribute as the plain Python value it was written from."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def replay_datasets(group: h5py.Group, path: str) -> list[h5py.Dataset]:
    """The datasets /replay lists, all present (else the file is incomplete)."""
    names = json.loads(group.attrs[REPLAY_DATASETS])
    missing = [name for name in names if name not in group]
    if missing:
        raise CorruptCheckpointError(
            path,
            f"checkpoint {path} is corrupted: replay/{missing[0]} is missing. {WHAT_TO_DO}",
        )
    return [group[name] for name in names]


def replay_checksum_failed(path: str, dataset: h5py.Dataset) -> CorruptCheckpointError:
    name = dataset.name.lstrip("/")
    return CorruptCheckpointError(
        path,
        f"checkpoint {path} is corrupted: {name} (the replay memory) fails its checksum. "
        f"{WHAT_TO_DO}",
    )


def verify_streaming(dataset: h5py.Dataset, path: str) -> None:
    """Checks a dataset's CRC reading at most `_CRC_CHUNK_BYTES` at a time."""
    if dataset.ndim == 0 or dataset.size == 0:
        crc = crc32(np.asarray(dataset[()]))
    else:
        row_bytes = max(1, dataset.size // dataset.shape[0] * dataset.dtype.itemsize)
        step = max(1, _CRC_CHUNK_BYTES // row_bytes)
        crc = 0
        for start in range(0, dataset.shape[0], step):
            crc = crc32(dataset[start : start + step], crc)
    if crc != int(dataset.attrs["crc32"]):
        raise replay_checksum_failed(path, dataset)


def corrupt(path: str, exc: Exception) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        path, f"checkpoint {path} is corrupted ({type(exc).__name__}: {exc}). {WHAT_TO_DO}"
    )


def load_replay(path: str) -> dict[str, Any]:
    """Reads the replay memory of a checkpoint file, checksums checked.

    Returns:
        The state `SequenceReplay.export_state` gave (`SequenceReplay.restore_state`
        takes it): numpy arrays and plain ints, floats and strs.

    Args:
        path: A checkpoint file.

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: If it holds no replay, or a replay dataset is missing or
            fails its checksum.
    """
    if not os.path.isfile(path):
        raise MissingCheckpointError(path, f"checkpoint {path} does not exist")
    file_path = path
    with open_file(file_path) as file:
        try:
            if "replay" not in file:
                raise CorruptCheckpointError(
                    file_path, f"checkpoint {file_path} holds no replay memory"
                )
            group = file["replay"]
            state: dict[str, Any] = {
                k: plain(v) for k, v in group.attrs.items() if k != REPLAY_DATASETS
            }
            for dataset in replay_datasets(group, file_path):
                array = np.asarray(dataset[()], order="C")
                if crc32(array) != int(dataset.attrs["crc32"]):
                    raise replay_checksum_failed(file_path, dataset)
                state[dataset.name.rsplit("/", 1)[-1]] = array
            return state
        except CheckpointError:
            raise
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise corrupt(file_path, exc) from exc
