"""Reading a replay's exported state (`export_state` / `restore_state`), shared by the
prioritized replay, the frame stores and the sequence replay: each getter returns the value
of one key with the type it must have, or raises a `ValueError` naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "ReplayStateDict",
    "expect_array",
    "expect_float",
    "expect_int",
    "expect_str",
    "expect_value",
]

ReplayStateDict = dict[str, Any]
"""A replay's exported state: flat name -> numpy array or plain scalar (int, float, str);
no Python objects, so it goes into an HDF5 file as datasets and attributes (no pickle)."""


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
    """`state[key]`, checked to be a numpy array of `dtype` and `shape` (None: any)."""
    value = expect_value(state, key)
    if not isinstance(value, np.ndarray):
        raise ValueError(f"replay state {key!r} must be a numpy array, got {type(value).__name__}")
    if value.dtype != np.dtype(dtype):
        raise ValueError(
            f"replay state {key!r} has dtype {value.dtype}, expected {np.dtype(dtype)}"
        )
    if shape is not None and value.shape != tuple(shape):
        raise ValueError(f"replay state {key!r} has shape {value.shape}, expected {tuple(shape)}")
    return value
