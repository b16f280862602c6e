"""The checkpoint file's format, shared by writing and reading (h5py, no TensorFlow).

A checkpoint (format version 2) is an HDF5 file behind a header that HDF5 leaves alone
(its "user block", the first 512 bytes or more): three lines of text, then zeros::

    r2d2-agent checkpoint
    {"format_version": 2, "userblock": 4096, "file_bytes": ..., "data_extents":
     [[offset, bytes], ...], "metadata_crc32": ...}
    <CRC-32 of the two lines above>

`data_extents` are where the bytes of the datasets that carry their own CRC-32 (an attr
`crc32`: weights, optimizer variables, replay arrays) lie; `metadata_crc32` is the CRC-32
of every other byte after the header: HDF5's structure (superblock, object headers,
links), every attribute (the config, the counters, the replay's scalars, each dataset's
`crc32`) and the small datasets without a CRC of their own. So every byte of the file is
covered by a checksum, and `open_checkpoint` checks the header and the metadata before
HDF5 parses anything: a damaged file is refused with `CorruptCheckpointError` (HDF5 is
not robust to damaged structure: it can raise anything, or crash the process), and a
dataset's bytes are checked against its `crc32` when it is read. Files of format version
1 (no header; written before it existed) are still read, with the datasets' CRCs only.

Also here: the CRC-32 of arrays, attributes as plain values, and reading the replay
group (`load_replay`, which `ReplaySnapshot.load` calls). The HDF5 layout itself is
described in `h5file`.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from r2d2_agent.checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    MissingCheckpointError,
)

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "StoredDataset", "load_replay", "stored_replay"]

FORMAT_NAME = "r2d2-agent checkpoint"
FORMAT_VERSION = 2
"""Format version written: 2 adds the header with the metadata checksum (`seal`)."""

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MAGIC = (FORMAT_NAME + "\n").encode()
_MAX_USERBLOCK = 1 << 24  # a header larger than this is damaged, not read
_EXTENT_CHARS = 30  # room for one "[offset, bytes], " of the header's JSON

WHAT_TO_DO = (
    "Resume from an earlier checkpoint (CheckpointCallback keeps the last few in the same "
    "directory) or start without resume_from."
)
REPLAY_DATASETS = "datasets"  # attr of /replay: the JSON list of its datasets
CHUNK_BYTES = 16 << 20
"""Big datasets are read (and their checksums computed) this many bytes at a time."""
PARSE_ERRORS = (
    OSError,
    LookupError,
    ValueError,
    TypeError,
    RuntimeError,
    AttributeError,
    ArithmeticError,
)
"""What h5py, numpy and json raise on a file that is not what it should be; reading maps
each to `CorruptCheckpointError`."""


WEIGHTS_WHAT_TO_DO = (
    "If it is still being written or copied, wait until it is complete; otherwise load an "
    "earlier file (save_weights and CheckpointCallback write through a temporary file and a "
    "rename, so their own files are never half-written)."
)


def corrupt(path: str, exc: Exception) -> CorruptCheckpointError:
    """The error for a file whose reading raised `exc` (one of `PARSE_ERRORS`)."""
    return CorruptCheckpointError(
        path, f"checkpoint {path} is corrupted ({type(exc).__name__}: {exc}). {WHAT_TO_DO}"
    )


# The header: written last, checked first ------------------------------------------------


def userblock_size(nb_datasets: int) -> int:
    """The header's room (HDF5's user block: a power of two >= 512) for a file of
    `nb_datasets` datasets."""
    needed = 512 + _EXTENT_CHARS * nb_datasets
    return 1 << max(9, (needed - 1).bit_length())


def _data_extents(file: h5py.File) -> list[list[int]]:
    """[offset, bytes] of the bytes of every dataset that carries its own `crc32`,
    ascending, adjacent ones merged."""
    extents = []

    def visit(_: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset) and "crc32" in item.attrs:
            size = item.id.get_storage_size()
            if size:
                extents.append([int(item.id.get_offset()), int(size)])

    file.visititems(visit)
    merged: list[list[int]] = []
    for offset, size in sorted(extents):
        if merged and merged[-1][0] + merged[-1][1] == offset:
            merged[-1][1] += size
        else:
            merged.append([offset, size])
    return merged


def _gaps(start: int, end: int, extents: list[list[int]]) -> Iterator[tuple[int, int]]:
    """(offset, bytes) of the ranges of [start, end) outside `extents` (ascending)."""
    position = start
    for offset, size in extents:
        if offset > position:
            yield position, offset - position
        position = max(position, offset + size)
    if end > position:
        yield position, end - position


def _crc_of_ranges(handle: Any, ranges: Iterator[tuple[int, int]]) -> int:
    crc = 0
    for offset, size in ranges:
        handle.seek(offset)
        while size > 0:
            chunk = handle.read(min(size, CHUNK_BYTES))
            if not chunk:
                raise EOFError(f"the file ends at {handle.tell()}, inside its metadata")
            crc = zlib.crc32(chunk, crc)
            size -= len(chunk)
    return crc


def seal(path: str) -> None:
    """Writes the header into the user block of the closed HDF5 file `path` (created with
    `userblock_size`): the datasets' extents and the CRC-32 of everything else.

    Raises:
        RuntimeError: If the user block is too small for the header (a bug).
    """
    with h5py.File(path, "r") as file:
        userblock = int(file.userblock_size)
        extents = _data_extents(file)
    file_bytes = os.path.getsize(path)
    with open(path, "r+b") as handle:
        metadata_crc = _crc_of_ranges(handle, _gaps(userblock, file_bytes, extents))
        fields = {
            "format_version": FORMAT_VERSION,
            "userblock": userblock,
            "file_bytes": file_bytes,
            "data_extents": extents,
            "metadata_crc32": metadata_crc,
        }
        text = _MAGIC + json.dumps(fields, separators=(",", ":")).encode() + b"\n"
        header = text + f"{zlib.crc32(text)}\n".encode()
        if len(header) > userblock:
            raise RuntimeError(f"a checkpoint header of {len(header)} bytes > {userblock}")
        handle.seek(0)
        handle.write(header)


def _unreadable(path: str, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        path, f"{path} cannot be read: it is truncated or corrupted ({what}). {WHAT_TO_DO}"
    )


def _damaged(path: str, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(path, f"checkpoint {path} is corrupted: {what}. {WHAT_TO_DO}")


def _read_header(path: str, handle: Any) -> dict[str, Any]:
    """The header's fields, checked: its own CRC, its zero padding, the file's size."""
    file_bytes = os.fstat(handle.fileno()).st_size
    text = handle.readline(len(_MAGIC)) + handle.readline(_MAX_USERBLOCK)
    crc_line = handle.readline(16)
    if not text.endswith(b"\n") or not crc_line.endswith(b"\n") or not crc_line[:-1].isdigit():
        raise _unreadable(path, f"its {FORMAT_NAME!r} header is incomplete")
    if zlib.crc32(text) != int(crc_line):
        raise _damaged(path, "its header fails its checksum")
    fields = json.loads(text[len(_MAGIC) :])
    version = int(fields["format_version"])
    if version > FORMAT_VERSION:
        raise CorruptCheckpointError(
            path,
            f"checkpoint {path} has format version {version}, newer than this library's "
            f"{FORMAT_VERSION}: upgrade r2d2-agent to read it",
        )
    written = int(fields["file_bytes"])
    if file_bytes < written:
        raise _unreadable(path, f"{file_bytes} of the {written} bytes written")
    if file_bytes > written:
        raise _damaged(path, f"it holds {file_bytes} bytes, {written} were written")
    userblock = int(fields["userblock"])
    header_bytes = len(text) + len(crc_line)
    if not header_bytes <= userblock <= min(file_bytes, _MAX_USERBLOCK):
        raise _damaged(path, f"its header does not fit its {userblock}-byte block")
    if handle.read(userblock - header_bytes).strip(b"\0"):
        raise _damaged(path, "its header block holds bytes after the header")
    return fields


def _check_metadata(path: str, handle: Any, fields: dict[str, Any]) -> int:
    """Checks the CRC-32 of every byte after the header outside the datasets' extents;
    returns it."""
    extents = [[int(offset), int(size)] for offset, size in fields["data_extents"]]
    crc = _crc_of_ranges(handle, _gaps(int(fields["userblock"]), fields["file_bytes"], extents))
    if crc != int(fields["metadata_crc32"]):
        raise _damaged(
            path,
            "its metadata (HDF5's structure, the attributes: config, counters, the "
            "replay's scalars, the datasets' checksums) fails its checksum",
        )
    return crc


def open_checkpoint(
    path: str, what_to_do: str = WHAT_TO_DO, metadata_crc32: int | None = None
) -> h5py.File:
    """Opens a checkpoint file for reading, its header and metadata checked first (format
    2); a plain HDF5 file (format 1, or not a checkpoint at all) opens as it is.

    Args:
        path: The file.
        what_to_do: The advice that ends an error's message.
        metadata_crc32: The metadata's CRC when the file was read before
            (`file_metadata_crc32`): a file changed since is refused.

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: Naming the file, if it is neither, or damaged, or changed.
    """
    try:
        found = file_metadata_crc32(path, what_to_do)
        if metadata_crc32 is not None and found != metadata_crc32:
            raise _damaged(path, "it changed since it was first read")
        return h5py.File(path, "r")
    except CheckpointError:
        raise
    except FileNotFoundError as exc:
        raise MissingCheckpointError(path, f"checkpoint {path} does not exist") from exc
    except PARSE_ERRORS as exc:
        raise CorruptCheckpointError(
            path,
            f"{path} cannot be read: it is truncated or corrupted, or not an HDF5 file "
            f"({type(exc).__name__}: {exc}). {what_to_do}",
        ) from exc


def file_metadata_crc32(path: str, what_to_do: str = WHAT_TO_DO) -> int | None:
    """The checked CRC-32 of a checkpoint's metadata (None for a plain HDF5 file).

    Raises:
        CorruptCheckpointError: As `open_checkpoint`.
        OSError: If the file cannot be opened.
    """
    with open(path, "rb") as handle:
        if handle.read(len(_MAGIC)) == _MAGIC:
            handle.seek(0)
            return _check_metadata(path, handle, _read_header(path, handle))
        handle.seek(0)
        if handle.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
            raise CorruptCheckpointError(
                path,
                f"{path} cannot be read: it is truncated or corrupted, or not an HDF5 file "
                f"(it starts with neither the {FORMAT_NAME!r} header nor HDF5's "
                f"signature). {what_to_do}",
            )
    return None


def is_sealed(file: h5py.File) -> bool:
    """Whether an open checkpoint has the header (format 2), i.e. was checked on opening."""
    return int(file.userblock_size) > 0


# Values and datasets ---------------------------------------------------------------------


def crc32(array: np.ndarray, value: int = 0) -> int:
    """CRC-32 of an array's bytes in C order (that of `array.tobytes()`), without a copy
    when the array is contiguous."""
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8), value)


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
        raise _damaged(path, f"replay/{missing[0]} is missing")
    return [group[name] for name in names]


def replay_checksum_failed(path: str, dataset: h5py.Dataset) -> CorruptCheckpointError:
    name = dataset.name.lstrip("/")
    return _damaged(path, f"{name} (the replay memory) fails its checksum")


def read_chunks(dataset: h5py.Dataset, path: str) -> Iterator[np.ndarray]:
    """A dataset as consecutive slices along its first axis of at most `CHUNK_BYTES`
    (a scalar or empty one whole); its CRC-32 is checked after the last.

    Raises:
        CorruptCheckpointError: If the checksum fails (once every slice was read).
    """
    if dataset.ndim == 0 or dataset.size == 0:
        chunk = np.asarray(dataset[()])
        crc = crc32(chunk)
        yield chunk
    else:
        row_bytes = max(1, dataset.size // dataset.shape[0] * dataset.dtype.itemsize)
        step = max(1, CHUNK_BYTES // row_bytes)
        crc = 0
        for start in range(0, dataset.shape[0], step):
            chunk = np.ascontiguousarray(dataset[start : start + step])
            crc = crc32(chunk, crc)
            yield chunk
    if crc != int(dataset.attrs["crc32"]):
        raise replay_checksum_failed(path, dataset)


def verify_streaming(dataset: h5py.Dataset, path: str) -> None:
    """Checks a dataset's CRC reading at most `CHUNK_BYTES` at a time."""
    for _ in read_chunks(dataset, path):
        pass


@dataclass(frozen=True)
class StoredDataset:
    """A replay array left in its checkpoint file, read when it is needed: a
    `StoredArray` of `r2d2_agent.replay.state_io`, which a replay's `restore_state` reads
    a slice at a time straight into its own arrays.

    Attributes:
        path: The checkpoint file.
        name: The dataset in it, e.g. "replay/frames.rows".
        shape: Its shape.
        dtype: Its dtype.
        metadata_crc32: The file's metadata CRC when it was listed (None: format 1): a
            file changed since is refused.
    """

    path: str
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    metadata_crc32: int | None

    def chunks(self) -> Iterator[np.ndarray]:
        """The array as consecutive slices of at most `CHUNK_BYTES`; its checksum is
        checked after the last.

        Raises:
            CorruptCheckpointError: Naming the file, if it changed, is damaged or the
                checksum fails.
        """
        with open_checkpoint(self.path, metadata_crc32=self.metadata_crc32) as file:
            try:
                dataset = file[self.name]
                yield from read_chunks(dataset, self.path)
            except CheckpointError:
                raise
            except PARSE_ERRORS as exc:
                raise corrupt(self.path, exc) from exc

    def read(self) -> np.ndarray:
        """The whole array, checksum checked."""
        out = np.empty(self.shape, self.dtype)
        if out.ndim == 0:
            (out[...],) = list(self.chunks())
            return out
        start = 0
        for chunk in self.chunks():
            out[start : start + len(chunk)] = chunk
            start += len(chunk)
        return out


def stored_replay(path: str) -> dict[str, Any]:
    """The replay memory of a checkpoint file, its arrays left in the file
    (`StoredDataset`s, read and checked when used).

    Args:
        path: A checkpoint file.

    Returns:
        The state `SequenceReplay.export_state` gave, each array a `StoredDataset`.

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: If it is damaged, holds no replay, or a replay dataset is
            missing.
    """
    if not os.path.isfile(path):
        raise MissingCheckpointError(path, f"checkpoint {path} does not exist")
    try:
        metadata_crc = file_metadata_crc32(path)
        with open_checkpoint(path, metadata_crc32=metadata_crc) as file:
            if "replay" not in file:
                raise CorruptCheckpointError(path, f"checkpoint {path} holds no replay memory")
            group = file["replay"]
            state: dict[str, Any] = {
                k: plain(v) for k, v in group.attrs.items() if k != REPLAY_DATASETS
            }
            for dataset in replay_datasets(group, path):
                state[dataset.name.rsplit("/", 1)[-1]] = StoredDataset(
                    path, dataset.name, tuple(dataset.shape), dataset.dtype, metadata_crc
                )
            return state
    except CheckpointError:
        raise
    except PARSE_ERRORS as exc:
        raise corrupt(path, exc) from exc


def load_replay(path: str) -> dict[str, Any]:
    """Reads the replay memory of a checkpoint file, checksums checked.

    Args:
        path: A checkpoint file.

    Returns:
        The state `SequenceReplay.export_state` gave (`SequenceReplay.restore_state`
        takes it): numpy arrays and plain ints, floats and strs.

    Raises:
        MissingCheckpointError: If the file does not exist.
        CorruptCheckpointError: If it is damaged, holds no replay, or a replay dataset is
            missing or fails its checksum.
    """
    return {
        key: value.read() if isinstance(value, StoredDataset) else value
        for key, value in stored_replay(path).items()
    }
