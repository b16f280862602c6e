"""Reading a replay's exported state (`export_state` / `restore_state`), shared by the
prioritized replay, the frame stores and the sequence replay: each getter returns the value
of one key with the type it must have, or raises a `ValueError` naming the key.

An array of a state may also be a `StoredArray`: one still in a file (a checkpoint's
dataset), which `restore_state` copies into the replay's own arrays a slice at a time
(`copy_into`), so that restoring a replay from a file holds it once, not twice (read
whole, then copied in)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ReplayStateDict",
    "StoredArray",
    "copy_into",
    "expect_array",
    "expect_float",
    "expect_int",
    "expect_str",
    "expect_stored",
    "expect_value",
    "iter_chunks",
    "load_array",
]

ReplayStateDict = dict[str, Any]
"""A replay's exported state: flat name -> numpy array or plain scalar (int, float, str);
no Python objects, so it goes into an HDF5 file as datasets and attributes (no pickle)."""


@runtime_checkable
class StoredArray(Protocol):
    """An array of a replay state that is not in memory (e.g. a checkpoint's dataset).

    Attributes:
        shape: The array's shape.
        dtype: Its dtype.
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    def chunks(self) -> Iterator[np.ndarray]:
        """The array as consecutive slices along its first axis, in order; checked as they
        are read (an error, e.g. a failed checksum, is raised by the iteration)."""
        ...


def iter_chunks(value: np.ndarray | StoredArray) -> Iterator[np.ndarray]:
    """An array's consecutive slices along its first axis (a numpy array: itself)."""
    if isinstance(value, np.ndarray):
        yield value
    else:
        yield from value.chunks()


def copy_into(out: np.ndarray, value: np.ndarray | StoredArray) -> None:
    """Copies `value` (of `out`'s shape) into `out`, a slice at a time if it is stored."""
    if isinstance(value, np.ndarray):
        out[...] = value
        return
    if out.ndim == 0:
        (out[...],) = list(value.chunks())  # all read: the check runs at the end
        return
    start = 0
    for chunk in value.chunks():
        out[start : start + len(chunk)] = chunk
        start += len(chunk)
    if start != len(out):
        raise ValueError(f"a stored array gave {start} rows, expected {len(out)}")


def load_array(value: np.ndarray | StoredArray) -> np.ndarray:
    """`value` in memory (a numpy array as it is; a stored one read)."""
    if isinstance(value, np.ndarray):
        return value
    out = np.empty(value.shape, value.dtype)
    copy_into(out, value)
    return out


def expect_value(state: Mapping[str, Any], key: str) -> Any:
    """`state[key]`, or a ValueError naming the missing key."""
    if key not in state:
        raise ValueError(f"replay state has no {key!r}")
    return state[key]


def expect_int(
    state: Mapping[str, Any], key: str, minimum: int | None = None, maximum: int | None = None
) -> int:
    """`state[key]` as an int in `[minimum, maximum]`, or a ValueError naming it."""
    value = expect_value(state, key)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"replay state {key!r} must be an int, got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"replay state {key!r} must be in [{minimum}, {maximum}], got {value}")
    return value


def expect_float(state: Mapping[str, Any], key: str) -> float:
    """`state[key]` as a float, or a ValueError naming it."""
    value = expect_value(state, key)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"replay state {key!r} must be a number, got {value!r}")
    return float(value)


def expect_str(state: Mapping[str, Any], key: str) -> str:
    """`state[key]` as a str, or a ValueError naming it."""
    value = expect_value(state, key)
    if not isinstance(value, str):
        raise ValueError(f"replay state {key!r} must be a str, got {value!r}")
    return value


def expect_array(
    state: Mapping[str, Any], key: str, shape: tuple[int, ...] | None, dtype: Any
) -> np.ndarray:
    """`state[key]`, checked to be an array of `dtype` and `shape` (None: any), in
    memory (a `StoredArray` is read)."""
    return load_array(expect_stored(state, key, shape, dtype))


def expect_stored(
    state: Mapping[str, Any], key: str, shape: tuple[int, ...] | None, dtype: Any
) -> np.ndarray | StoredArray:
    """`state[key]`, checked as by `expect_array`, but a `StoredArray` is not read (for
    the big arrays that `copy_into` copies into the replay's own)."""
    value = expect_value(state, key)
    if not isinstance(value, (np.ndarray, StoredArray)):
        raise ValueError(f"replay state {key!r} must be a numpy array, got {type(value).__name__}")
    if value.dtype != np.dtype(dtype):
        raise ValueError(
            f"replay state {key!r} has dtype {value.dtype}, expected {np.dtype(dtype)}"
        )
    if shape is not None and value.shape != tuple(shape):
        raise ValueError(f"replay state {key!r} has shape {value.shape}, expected {tuple(shape)}")
    return value
