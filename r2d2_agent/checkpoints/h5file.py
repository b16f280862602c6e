"""Checkpoint files: one HDF5 file each, written atomically, read with clear errors.

Layout of a checkpoint (format version 2)::

    header            the first 512+ bytes (HDF5's user block): the format's name, the
                      extents of the checksummed datasets and the CRC-32 of all the rest,
                      with its own CRC (`h5format`)
    /                 attrs: format = "r2d2-agent checkpoint", format_version = 2,
                             library_version, created (Unix time), config (JSON text of
                             `R2D2Config.to_dict()`)
    /online/0000 ...  the online network's weights, `get_weights()` order
                      (each dataset: attrs name, crc32)
    /target/0000 ...  the target network's weights, same order
    /optimizer/0000   the optimizer's variables (Adam: iteration count, then m and v per
                      variable), attrs name, crc32
    /counters         attrs env_steps, learner_updates, episodes, sequences_received;
                      datasets actor_env_steps, actor_episodes (int64, per actor index)
    /replay           optional (`CheckpointCallback(save_replay=True)`): the replay memory,
                      `SequenceReplay.export_state()` flattened: its scalars as attrs
                      (plus `datasets`, the JSON list of its arrays), each array a dataset
                      of that name (attrs crc32), e.g. sequences.items.actions,
                      sequences.leaves (the sum tree's priorities), frames.rows.

Every byte is covered by a checksum: each big dataset carries the CRC-32 of its bytes,
checked when it is read, and the header holds the CRC-32 of everything else (HDF5's
structure, every attribute, the counters), checked before HDF5 parses the file. So a
damaged file is refused with `CorruptCheckpointError` naming it, never loaded in part
(e.g. without its replay) or with other counters. Loading uses h5py only: no pickle, no
code from the file. `read_checkpoint` checks the replay's checksums (streaming, without
keeping it) and leaves its arrays in the file; `ReplaySnapshot.load` (`read_replay`)
reads them when a learner restores them. Files of format version 1 (no header) are still
read, their datasets' checksums checked.

Writing goes to a temporary file in the same directory (`.<name>.<owner tag>.tmp`), which
is flushed, fsynced and renamed over the target (an atomic step on POSIX), then the
directory is fsynced (`r2d2_agent.leftovers.atomic_write`): a process killed at any moment
leaves the previous checkpoint intact, and its temp file, whose name says which process
wrote it, is removed by the next prune or write of that file once that process is dead.
In a checkpoint directory the files are named `ckpt-<N>.h5` (N: learner updates, or the
single-process agent's env steps), and `prune_checkpoints` keeps the last K.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from r2d2_agent.checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    MissingCheckpointError,
    WeightsFileError,
)
from r2d2_agent.checkpoints.h5format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    PARSE_ERRORS,
    REPLAY_DATASETS,
    WEIGHTS_WHAT_TO_DO,
    WHAT_TO_DO,
    corrupt,
    crc32,
    is_sealed,
    load_replay,
    open_checkpoint,
    plain,
    replay_datasets,
    seal,
    userblock_size,
    verify_streaming,
)
from r2d2_agent.checkpoints.state import ReplaySnapshot, TrainingCounters, TrainingState
from r2d2_agent.leftovers import atomic_write, reclaim_temp_files

__all__ = [
    "CHECKPOINT_PATTERN",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "checkpoint_files",
    "checkpoint_name",
    "is_checkpoint_file",
    "latest_checkpoint",
    "prune_checkpoints",
    "read_checkpoint",
    "read_replay",
    "resolve_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d+)\.h5$")
"""Names of the checkpoints in a checkpoint directory: `ckpt-<N>.h5`."""

_KERAS_WEIGHTS_MARKS = {"layer_names", "keras_version"}  # root attrs of Keras's HDF5 weights
_COUNTER_ATTRS = ("env_steps", "learner_updates", "episodes", "sequences_received")


def checkpoint_name(number: int) -> str:
    """File name of checkpoint `number` in a checkpoint directory: `ckpt-<number>.h5`."""
    return f"ckpt-{int(number):010d}.h5"


# Writing ---------------------------------------------------------------------------------


def _write_arrays(
    file: h5py.File, group_name: str, arrays: Sequence[np.ndarray], names: Sequence[str]
) -> None:
    group = file.create_group(group_name)
    group.attrs["count"] = len(arrays)
    for i, array in enumerate(arrays):
        array = np.asarray(array, order="C")
        dataset = group.create_dataset(f"{i:04d}", data=array)
        dataset.attrs["crc32"] = crc32(array)
        dataset.attrs["name"] = names[i] if i < len(names) else ""


def _write_replay(file: h5py.File, state: dict[str, Any]) -> None:
    """The replay's scalars as attrs of /replay, each array as a dataset with its CRC."""
    group = file.create_group("replay")
    names = []
    for name, value in state.items():
        if name == REPLAY_DATASETS or "/" in name:
            raise ValueError(f"a replay state cannot have a value named {name!r}")
        if isinstance(value, np.ndarray):
            dataset = group.create_dataset(name, data=value)
            dataset.attrs["crc32"] = crc32(value)
            names.append(name)
        else:
            group.attrs[name] = value
    group.attrs[REPLAY_DATASETS] = json.dumps(names)


def write_checkpoint(path: str | os.PathLike[str], state: TrainingState) -> str:
    """Writes `state` to the HDF5 file `path`, atomically (temp file, fsync, rename).

    Args:
        path: The checkpoint file to write (replaced if it exists).
        state: What to write.

    Returns:
        The path written.
    """
    from r2d2_agent import __version__

    path = os.fspath(path)
    replay = state.replay.load() if state.replay is not None else None
    nb_datasets = len(state.online_weights) + len(state.target_weights)
    nb_datasets += len(state.average_weights or ())
    nb_datasets += len(state.optimizer_weights) + 2 + len(replay or ())
    # `.<name>.<owner tag>.tmp`, fsynced, renamed, directory fsynced; if we are killed, a
    # later run removes the temp file once we are dead.
    with atomic_write(path, durable=True) as tmp:
        with h5py.File(tmp, "w", userblock_size=userblock_size(nb_datasets)) as file:
            file.attrs["format"] = FORMAT_NAME
            file.attrs["format_version"] = FORMAT_VERSION
            file.attrs["library_version"] = state.library_version or __version__
            file.attrs["created"] = time.time()
            file.attrs["config"] = json.dumps(state.config, sort_keys=True)
            _write_arrays(file, "online", state.online_weights, state.weight_names)
            _write_arrays(file, "target", state.target_weights, state.weight_names)
            if state.average_weights is not None:
                _write_arrays(file, "average", state.average_weights, state.weight_names)
            _write_arrays(file, "optimizer", state.optimizer_weights, state.optimizer_names)
            counters = file.create_group("counters")
            for name in _COUNTER_ATTRS:
                counters.attrs[name] = getattr(state.counters, name)
            for name in ("actor_env_steps", "actor_episodes"):
                values = np.asarray(getattr(state.counters, name), dtype=np.int64)
                counters.create_dataset(name, data=values)
            if replay is not None:
                _write_replay(file, replay)
        seal(tmp)
    return path


def prune_checkpoints(directory: str | os.PathLike[str], keep: int) -> list[str]:
    """Deletes all but the `keep` highest-numbered checkpoints of `directory`, and the
    temp files of writers that were killed mid-save (`r2d2_agent.leftovers`: their owner
    is dead; a live writer's are kept).

    Returns:
        The deleted checkpoints.
    """
    reclaim_temp_files(directory)
    files = checkpoint_files(directory)
    doomed = [path for _, path in files[: max(0, len(files) - keep)]]
    for path in doomed:
        try:
            os.remove(path)
        except FileNotFoundError:  # pruned by another writer meanwhile
            pass
    return doomed


# Finding ---------------------------------------------------------------------------------


def checkpoint_files(directory: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """The checkpoints of a directory as (N, path), oldest (lowest N) first.

    Temporary files of writes in progress (or of writers that were killed) are ignored.
    """
    directory = os.fspath(directory)
    found = []
    for name in os.listdir(directory):
        match = CHECKPOINT_PATTERN.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike[str]) -> str | None:
    """The highest-numbered checkpoint of `directory` (None if it holds none)."""
    files = checkpoint_files(directory)
    return files[-1][1] if files else None


def resolve_checkpoint(path: str | os.PathLike[str]) -> str:
    """The checkpoint file that `path` names: the file itself, or a directory's latest.

    Raises:
        MissingCheckpointError: If `path` does not exist, or is a directory without
            checkpoints.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise MissingCheckpointError(
                path,
                f"checkpoint directory {path} holds no checkpoint (files named ckpt-<N>.h5); "
                "give a checkpoint file or the directory a CheckpointCallback wrote to",
            )
        return latest
    if not os.path.exists(path):
        raise MissingCheckpointError(path, f"checkpoint {path} does not exist")
    return path


# Reading ---------------------------------------------------------------------------------


def is_checkpoint_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is an r2d2-agent checkpoint (else, e.g., a Keras weights file).

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: If it cannot be opened as HDF5 (truncated, corrupted).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingCheckpointError(path, f"weights file {path} does not exist")
    with open_checkpoint(path, WEIGHTS_WHAT_TO_DO) as file:
        try:
            return plain(file.attrs.get("format")) == FORMAT_NAME
        except PARSE_ERRORS as exc:
            raise corrupt(path, exc) from exc


def _read_arrays(file: h5py.File, group_name: str, path: str) -> tuple[list[np.ndarray], list]:
    if group_name not in file:
        raise CorruptCheckpointError(
            path, f"checkpoint {path} has no '{group_name}' group: it is incomplete. {WHAT_TO_DO}"
        )
    group = file[group_name]
    count = int(group.attrs["count"])
    arrays, names = [], []
    for i in range(count):
        dataset = group[f"{i:04d}"]
        array = np.asarray(dataset[()], order="C")
        if crc32(array) != int(dataset.attrs["crc32"]):
            raise CorruptCheckpointError(
                path,
                f"checkpoint {path} is corrupted: {group_name}/{i:04d} "
                f"({dataset.attrs.get('name', '')}) fails its checksum. {WHAT_TO_DO}",
            )
        arrays.append(array)
        names.append(str(dataset.attrs.get("name", "")))
    return arrays, names


def _read_replay_summary(file: h5py.File, path: str, verify: bool) -> ReplaySnapshot | None:
    """The checkpoint's replay (scalars only; arrays left in the file), checksums checked
    when `verify`; None if the checkpoint holds no replay."""
    if "replay" not in file:
        return None
    group = file["replay"]
    datasets = replay_datasets(group, path)
    if verify:
        for dataset in datasets:
            verify_streaming(dataset, path)
    scalars = {k: plain(v) for k, v in group.attrs.items() if k != REPLAY_DATASETS}
    nbytes = sum(int(d.size) * d.dtype.itemsize for d in datasets)
    return ReplaySnapshot(scalars=scalars, arrays=None, path=path, nbytes=nbytes)


def _read(file: h5py.File, path: str, verify_replay: bool = True) -> TrainingState:
    fmt = file.attrs.get("format")
    if fmt != FORMAT_NAME and _KERAS_WEIGHTS_MARKS & set(file.attrs):
        raise WeightsFileError(
            path,
            f"{path} is a weights file (written by save_weights), not a checkpoint: it holds "
            "the network's weights but no optimizer state, counters or replay, so a run "
            "cannot resume from it. Load it with R2D2Agent.load_weights(path) and train "
            "without resume_from, or resume from a checkpoint (CheckpointCallback, "
            "R2D2Agent.save_checkpoint)",
        )
    if fmt != FORMAT_NAME:
        raise CorruptCheckpointError(
            path,
            f"{path} is not an r2d2-agent checkpoint (no '{FORMAT_NAME}' format mark); a "
            "weights file written by save_weights loads with R2D2Agent.load_weights",
        )
    version = int(file.attrs["format_version"])
    if version > FORMAT_VERSION:
        raise CorruptCheckpointError(
            path,
            f"checkpoint {path} has format version {version}, newer than this library's "
            f"{FORMAT_VERSION}: upgrade r2d2-agent to read it",
        )
    if version != (FORMAT_VERSION if is_sealed(file) else 1):
        raise CorruptCheckpointError(
            path,
            f"checkpoint {path} is corrupted: it says format version {version} but "
            f"{'has' if is_sealed(file) else 'lacks'} the header of version 2. {WHAT_TO_DO}",
        )
    config = json.loads(file.attrs["config"])
    online, weight_names = _read_arrays(file, "online", path)
    target, _ = _read_arrays(file, "target", path)
    average = _read_arrays(file, "average", path)[0] if "average" in file else None
    optimizer, optimizer_names = _read_arrays(file, "optimizer", path)
    group = file["counters"]
    counters = TrainingCounters(
        **{name: int(group.attrs[name]) for name in _COUNTER_ATTRS},
        actor_env_steps=tuple(int(v) for v in group["actor_env_steps"][()]),
        actor_episodes=tuple(int(v) for v in group["actor_episodes"][()]),
    )
    return TrainingState(
        online_weights=online,
        target_weights=target,
        optimizer_weights=optimizer,
        weight_names=tuple(weight_names),
        optimizer_names=tuple(optimizer_names),
        counters=counters,
        config=config,
        library_version=str(file.attrs["library_version"]),
        path=path,
        replay=_read_replay_summary(file, path, verify_replay),
        average_weights=average,
    )


def read_checkpoint(path: str | os.PathLike[str], verify_replay: bool = True) -> TrainingState:
    """Reads a checkpoint file, or the latest checkpoint of a directory.

    A replay memory in the checkpoint is not loaded: `state.replay` is a `ReplaySnapshot`
    whose `load()` reads it from the file when a learner restores it.

    Args:
        path: A checkpoint file, or a directory of `ckpt-<N>.h5` files.
        verify_replay: Check the replay's checksums now (reading it once, a chunk at a
            time), so that a corrupted replay is refused before any process starts.

    Returns:
        The state, with `path` set to the file read.

    Raises:
        MissingCheckpointError: If there is no such file (or no checkpoint in the
            directory).
        CorruptCheckpointError: If the file is truncated, corrupted (a checksum fails),
            incomplete, or not an r2d2-agent checkpoint.
        WeightsFileError: If it is a weights file (`save_weights`); the message says how
            to load it.
    """
    file_path = resolve_checkpoint(path)
    with open_checkpoint(file_path) as file:
        try:
            return _read(file, file_path, verify_replay)
        except CheckpointError:
            raise
        except PARSE_ERRORS as exc:
            raise corrupt(file_path, exc) from exc


def read_replay(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads the replay memory of a checkpoint file (or of a directory's latest),
    checksums checked.

    Returns:
        The state `SequenceReplay.export_state` gave (`SequenceReplay.restore_state`
        takes it): numpy arrays and plain ints, floats and strs.

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: If it holds no replay, or a replay dataset is missing or
            fails its checksum.
    """
    return load_replay(resolve_checkpoint(path))
