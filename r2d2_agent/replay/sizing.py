"""How much memory a replay will hold, known before it is allocated.

`estimate_replay_bytes(config)` adds up exactly what `SequenceReplay` allocates at full
capacity (frames in their storage dtype, the sequences' fields, the sum tree), so the agent
and the manager can log it and refuse, before anything starts, a replay that does not fit
in the machine's available memory.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.replay.frame_store import CompressedFrameStore, RawFrameStore, zstd_module
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.sequence_replay import compressed_budget, default_frame_capacity

__all__ = [
    "available_memory_bytes",
    "check_replay_fits",
    "estimate_replay_bytes",
    "largest_memory_capacity",
    "storage_dtype",
]

logger = logging.getLogger(__name__)


def storage_dtype(config: R2D2Config, observation_dtype: Any = None) -> np.dtype:
    """The dtype frames are stored as: `observation_dtype`, or by default uint8 for image
    input types (one byte a pixel) and float32 for values."""
    if observation_dtype is not None:
        return np.dtype(observation_dtype)
    return np.dtype(np.uint8 if config.is_image else np.float32)


def _sequence_bytes(layout: SequenceLayout) -> int:
    """Bytes of one sequence's stored fields, as `SequenceReplay` stores them: frame
    numbers as int64 (not the int32 ids of the wire) and an int64 `oldest_frame`."""
    spec = dict(layout.field_spec())
    spec["frame_ids"] = (spec["frame_ids"][0], np.dtype(np.int64))
    fields = sum(
        int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in spec.values()
    )
    return fields + 8


def _tree_bytes(capacity: int) -> int:
    """Sum tree (float64 nodes over leaves rounded up to a power of two, int64 scratch),
    generation counters (int64) and live flags (bool) of a `PrioritizedSequenceReplay`."""
    leaves = 1 << max(0, (capacity - 1).bit_length())
    return 2 * leaves * 8 + capacity * 8 + capacity * 8 + capacity


def _replay_bytes(layout: SequenceLayout, capacity: int, config: R2D2Config) -> int:
    frame_capacity = default_frame_capacity(layout, capacity)
    if config.frame_compression is None:
        frames = RawFrameStore.budget_bytes(layout.frame_nbytes, frame_capacity)
    else:
        budget = compressed_budget(layout, frame_capacity, config.frame_compression_ratio)
        frames = CompressedFrameStore.budget_bytes(
            budget, frame_capacity, layout.frames_per_sequence, layout.frame_nbytes
        )
    return frames + capacity * _sequence_bytes(layout) + _tree_bytes(capacity)


def estimate_replay_bytes(config: R2D2Config, observation_dtype: Any = None) -> int:
    """Bytes the replay of `config` holds at full capacity.

    Args:
        config: The configuration (`memory_capacity` counts sequences).
        observation_dtype: The storage dtype of frames; the default of `storage_dtype`
            when None.

    Returns:
        Frames (`default_frame_capacity` of them and a zero frame; with compression the
        byte budget of the compressed blocks and their index) + sequence fields + sum tree.
    """
    layout = SequenceLayout.from_config(config, storage_dtype(config, observation_dtype))
    return _replay_bytes(layout, config.memory_capacity, config)


def available_memory_bytes() -> int | None:
    """Memory the system can give a new allocation now (`MemAvailable` on Linux), or None
    where it cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_replay_fits(
    config: R2D2Config, observation_dtype: Any = None, available: int | None = None
) -> int:
    """Logs the replay's size and refuses one larger than the available memory.

    Args:
        config: The configuration.
        observation_dtype: The storage dtype of frames (None: `storage_dtype`'s default).
        available: Bytes available; `available_memory_bytes()` when None.

    Returns:
        The estimate, in bytes.

    Raises:
        ValueError: If the estimate exceeds the available memory; the message names
            `memory_capacity`, the estimate and the available memory, and suggests the
            capacity whose replay takes half of it.
        ImportError: For `frame_compression="zstd"` without the zstandard package.
    """
    if config.frame_compression == "zstd":
        zstd_module()  # a missing codec fails here, before anything starts
    estimate = estimate_replay_bytes(config, observation_dtype)
    if available is None:
        available = available_memory_bytes()
    dtype = storage_dtype(config, observation_dtype)
    logger.info(
        "replay: %d sequences, frames stored as %s: %.2f GiB at full capacity (%s available)",
        config.memory_capacity,
        dtype,
        estimate / 2**30,
        "unknown" if available is None else f"{available / 2**30:.1f} GiB",
    )
    if available is not None and estimate > available:
        fits = largest_memory_capacity(config, available, observation_dtype)
        half = largest_memory_capacity(config, available // 2, observation_dtype)
        raise ValueError(
            f"memory_capacity={config.memory_capacity} sequences need "
            f"{estimate / 2**30:.2f} GiB of replay ({estimate} bytes, frames as {dtype}) but "
            f"only {available / 2**30:.2f} GiB ({available} bytes) are available; lower "
            f"memory_capacity, e.g. memory_capacity={half} (a replay in half of the "
            "available memory, leaving the rest to TensorFlow, the networks, the actors "
            f"and the system; {fits} would fill all of it)"
        )
    return estimate


def largest_memory_capacity(
    config: R2D2Config, budget_bytes: int, observation_dtype: Any = None
) -> int:
    """The largest `memory_capacity` whose replay fits in `budget_bytes` (0 if none)."""
    layout = SequenceLayout.from_config(config, storage_dtype(config, observation_dtype))
    low, high = 0, 1
    while _replay_bytes(layout, high, config) <= budget_bytes:
        low, high = high, high * 2
        if high > 1 << 40:
            return low
    while high - low > 1:  # the estimate grows with the capacity: bisect
        middle = (low + high) // 2
        if _replay_bytes(layout, middle, config) <= budget_bytes:
            low = middle
        else:
            high = middle
    return low
