"""Frame stores: where `SequenceReplay` keeps every frame once.

A store gives each frame a number that only grows, keeps the most recent ones, and
gathers any kept frames back by number. Two stores:

* `RawFrameStore`: a ring of `capacity` frames in their storage dtype (plus a zero frame).
* `CompressedFrameStore`: the frames of each `store` call (one record's new frames, about
  `period` consecutive frames) compressed together with zstandard (level 1), within a
  byte budget fixed in advance. Consecutive frames of one episode compress together far
  better than single frames (ALE frames: 26x to 190x for blocks of 40). When the blobs
  outgrow the budget (frames that compress worse than it was sized for), the oldest blobs
  go early, so memory stays what was announced. Each blob holds exactly its compressed
  bytes (plus a fixed bookkeeping cost, counted in the budget).

Both report `oldest_kept`: frames numbered below it are gone, and the sequences using them
must no longer be sampled. Both export their state as flat numpy arrays and scalars
(`export_state`; compressed blocks as one uint8 array and offsets) and restore it
(`restore_state`, reading arrays still in a checkpoint file a slice at a time), for
checkpoints.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from r2d2_agent.replay.state_io import (
    ReplayStateDict,
    StoredArray,
    copy_into,
    expect_array,
    expect_int,
    expect_stored,
    expect_str,
    iter_chunks,
    load_array,
)

__all__ = ["CompressedFrameStore", "RawFrameStore", "zstd_module"]

logger = logging.getLogger(__name__)


def zstd_module() -> Any:
    """The `zstandard` module.

    Raises:
        ImportError: Naming the extra to install, if zstandard is missing.
    """
    try:
        import zstandard
    except ImportError as exc:
        raise ImportError(
            "frame_compression='zstd' needs the zstandard package: "
            "pip install 'r2d2-agent[zstd]' (or pip install zstandard)"
        ) from exc
    return zstandard


class RawFrameStore:
    """A ring of `capacity` frames; frame number `k` lives in row `k % capacity`.

    Args:
        frame_shape: Shape of one frame.
        dtype: Storage dtype.
        capacity: Frames kept.
    """

    def __init__(self, frame_shape: tuple[int, ...], dtype: np.dtype, capacity: int) -> None:
        self.capacity = int(capacity)
        # The extra last row is the zero frame that number -1 reads.
        self._frames = np.zeros((self.capacity + 1, *frame_shape), dtype)
        self._next = 0

    @property
    def next_number(self) -> int:
        """The number the next stored frame gets."""
        return self._next

    @property
    def oldest_kept(self) -> int:
        """Frames numbered below this are gone."""
        return max(0, self._next - self.capacity)

    @property
    def nbytes(self) -> int:
        """Bytes allocated (pages not yet written are not resident)."""
        return self._frames.nbytes

    @staticmethod
    def budget_bytes(frame_nbytes: int, capacity: int) -> int:
        """What a store of `capacity` frames allocates."""
        return (capacity + 1) * frame_nbytes

    def store(self, frames: np.ndarray) -> np.ndarray:
        """Keeps `frames` (in order); returns their numbers."""
        count = len(frames)
        numbers = self._next + np.arange(count, dtype=np.int64)
        kept = slice(max(0, count - self.capacity), count)
        self._frames[numbers[kept] % self.capacity] = frames[kept]
        self._next += count
        return numbers

    def gather(self, numbers: np.ndarray) -> np.ndarray:
        """Frames by number (any shape of numbers); -1 gives a zero frame."""
        rows = np.where(numbers >= 0, numbers % self.capacity, self.capacity)
        return self._frames[rows]

    def export_state(self, prefix: str = "", copy: bool = True) -> ReplayStateDict:
        """The store's state (keys after `prefix`): `kind` ("raw"), `capacity`, `next`
        and `rows`, the ring rows written so far (`min(next, capacity)` frames)."""
        rows = self._frames[: min(self._next, self.capacity)]
        return {
            prefix + "kind": "raw",
            prefix + "capacity": self.capacity,
            prefix + "next": self._next,
            prefix + "rows": rows.copy() if copy else rows,
        }

    def check_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Raises a ValueError naming the key unless `state` fits this store."""
        _check_kind(state, prefix, "raw")
        _check_capacity(state, prefix, self.capacity)
        count = expect_int(state, prefix + "next", 0)
        rows = (min(count, self.capacity), *self._frames.shape[1:])
        expect_stored(state, prefix + "rows", rows, self._frames.dtype)

    def restore_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Replaces the store's frames with an exported state's (stored rows are read
        straight into the ring).

        Raises:
            ValueError: As `check_state`; the store is then unchanged.
        """
        self.check_state(state, prefix)
        rows = state[prefix + "rows"]
        copy_into(self._frames[: rows.shape[0]], rows)
        self._frames[rows.shape[0] :] = 0
        self._next = int(state[prefix + "next"])


def _check_kind(state: Mapping[str, Any], prefix: str, kind: str) -> None:
    found = expect_str(state, prefix + "kind")
    if found != kind:
        raise ValueError(
            f"replay state holds a {found!r} frame store ({prefix}kind), this replay a "
            f"{kind!r} one (another frame_compression?)"
        )


def _check_capacity(state: Mapping[str, Any], prefix: str, capacity: int) -> None:
    found = expect_int(state, prefix + "capacity")
    if found != capacity:
        raise ValueError(
            f"replay state holds {found} frames ({prefix}capacity), this replay's frame "
            f"store {capacity}"
        )


BLOCK_OVERHEAD = 256
"""Bytes a stored block costs besides its compressed bytes: the bytes object's header,
its tuple, the ordered dict's entry and node (200-260 bytes measured with tracemalloc,
CPython 3.11). Counted in the budget, so that many tiny blocks cannot outgrow it."""


class CompressedFrameStore:
    """Blocks of consecutive frames compressed with zstandard, within a byte budget.

    Each block is held as a bytes object of exactly its compressed length (what
    zstandard returns keeps the allocation of its worst case, about the raw block, so it
    is copied), and costs its length plus `BLOCK_OVERHEAD` against the budget: the bytes
    counted are the bytes held.

    Args:
        frame_shape: Shape of one frame.
        dtype: Storage dtype.
        capacity: Frames kept at most (as the raw store would).
        byte_budget: Bytes the compressed blocks (with `BLOCK_OVERHEAD` each) may take;
            the oldest blocks go early when they would take more.
        level: zstandard compression level.
    """

    def __init__(
        self,
        frame_shape: tuple[int, ...],
        dtype: np.dtype,
        capacity: int,
        byte_budget: int,
        level: int = 1,
    ) -> None:
        zstandard = zstd_module()
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame_shape = tuple(frame_shape)
        self._dtype = np.dtype(dtype)
        self._frame_nbytes = int(np.prod(frame_shape, dtype=np.int64)) * self._dtype.itemsize
        self.capacity = int(capacity)
        self.byte_budget = int(byte_budget)
        self._next = 0
        self._oldest = 0
        # Per frame slot (number % capacity): its block and its index in the block.
        self._block_of = np.full(self.capacity, -1, dtype=np.int64)
        self._index_in_block = np.zeros(self.capacity, dtype=np.int32)
        # Blocks in number order: (first frame number, frame count, compressed bytes).
        self._blocks: collections.OrderedDict[int, tuple[int, int, bytes]] = (
            collections.OrderedDict()
        )
        self._next_block = 0
        self._block_bytes = 0
        self.blocks_over_budget = 0
        """Blocks dropped before the frame ring needed their slots, to stay in the byte
        budget (frames compressed worse than the store was sized for)."""

    @property
    def next_number(self) -> int:
        """The number the next stored frame gets."""
        return self._next

    @property
    def oldest_kept(self) -> int:
        """Frames numbered below this are gone."""
        return self._oldest

    @property
    def nbytes(self) -> int:
        """Bytes held: compressed blocks (with their overhead) and the per-frame index."""
        return self._block_bytes + self._block_of.nbytes + self._index_in_block.nbytes

    @property
    def sized_ratio(self) -> float:
        """The compression (raw frames over block bytes) the budget was sized for: the
        frame capacity's raw bytes over the byte budget."""
        return self.capacity * self._frame_nbytes / max(1, self.byte_budget)

    @property
    def held_ratio(self) -> float:
        """The compression of the blocks held (raw frames over their bytes, the blocks'
        bookkeeping included, as the budget counts them); 0 while none is held."""
        frames = sum(count for _, count, _ in self._blocks.values())
        return frames * self._frame_nbytes / self._block_bytes if self._block_bytes else 0.0

    @staticmethod
    def budget_bytes(byte_budget: int, capacity: int, block_frames: int, frame_nbytes: int) -> int:
        """The most such a store holds: the block budget, one more block (the newest is
        kept even when it alone is over budget), and the per-frame index.

        Args:
            byte_budget: The budget of the compressed blocks.
            capacity: Frames kept at most.
            block_frames: The most frames one `store` call brings.
            frame_nbytes: Bytes of one raw frame.
        """
        raw = block_frames * frame_nbytes
        block_bound = raw + (raw >> 8) + 64  # zstd's worst case for incompressible data
        return byte_budget + block_bound + BLOCK_OVERHEAD + capacity * (8 + 4)

    def store(self, frames: np.ndarray) -> np.ndarray:
        """Compresses `frames` (in order) as one block; returns their numbers."""
        count = len(frames)
        numbers = self._next + np.arange(count, dtype=np.int64)
        if count == 0:
            return numbers
        compressed = self._compressor.compress(np.ascontiguousarray(frames, self._dtype).tobytes())
        # zstandard's result keeps the allocation of its worst case (about the raw block)
        # and only reports the shorter length: a copy of that length holds what it says.
        payload = bytes(memoryview(compressed))
        del compressed
        block = self._next_block
        self._next_block += 1
        self._blocks[block] = (self._next, count, payload)
        self._block_bytes += len(payload) + BLOCK_OVERHEAD
        kept = numbers[max(0, count - self.capacity) :]
        self._block_of[kept % self.capacity] = block
        self._index_in_block[kept % self.capacity] = np.arange(count - len(kept), count)
        self._next += count
        self._drop_old_blocks()
        return numbers

    def _drop_old_blocks(self) -> None:
        """Forgets blocks out of the frame ring, then the oldest while over budget."""
        ring_oldest = max(0, self._next - self.capacity)
        while self._blocks:
            block, (first, count, payload) = next(iter(self._blocks.items()))
            over_budget = self._block_bytes > self.byte_budget and len(self._blocks) > 1
            if first + count <= ring_oldest or over_budget:
                if first + count > ring_oldest:
                    self._note_over_budget()
                del self._blocks[block]
                self._block_bytes -= len(payload) + BLOCK_OVERHEAD
                self._oldest = max(self._oldest, first + count)
            else:
                break
        self._oldest = max(self._oldest, ring_oldest)

    def _note_over_budget(self) -> None:
        """Counts a block dropped to stay in budget; the first one is logged, with the
        compression measured and what to set instead."""
        self.blocks_over_budget += 1
        if self.blocks_over_budget > 1:
            return
        held = self.held_ratio
        if held >= 1:
            advice = (
                f"frame_compression_ratio={math.floor(held * 10) / 10} would keep them "
                "(the replay's memory estimate grows with it)"
            )
        else:
            advice = "these frames do not shrink: store them raw (frame_compression=None)"
        logger.warning(
            "replay frames compress %.2f:1 (the blocks held, bookkeeping included), worse "
            "than the %.1f:1 (frame_compression_ratio) the frame store was sized for: the "
            "oldest frames leave before the frame ring needs their room, and their "
            "sequences with them, so the replay holds fewer sequences than it could; %s",
            held,
            self.sized_ratio,
            advice,
        )

    def gather(self, numbers: np.ndarray) -> np.ndarray:
        """Frames by number (any shape of numbers); -1 gives a zero frame.

        Each block a batch needs is decompressed once.
        """
        numbers = np.asarray(numbers)
        out = np.zeros((*numbers.shape, *self._frame_shape), self._dtype)
        flat = numbers.reshape(-1)
        real = np.flatnonzero(flat >= 0)
        slots = flat[real] % self.capacity
        blocks = self._block_of[slots]
        positions = self._index_in_block[slots]
        out_flat = out.reshape(-1, *self._frame_shape)
        for block in np.unique(blocks):
            first, count, payload = self._blocks[int(block)]
            frames = np.frombuffer(
                self._decompressor.decompress(payload, max_output_size=count * self._frame_nbytes),
                self._dtype,
            ).reshape(count, *self._frame_shape)
            here = blocks == block
            out_flat[real[here]] = frames[positions[here]]
        return out

    def export_state(self, prefix: str = "", copy: bool = True) -> ReplayStateDict:
        """The store's state (keys after `prefix`): `kind` ("zstd"), `capacity`,
        `byte_budget`, `next`, `oldest`, `next_block`; the per-slot index `block_of`
        (int64) and `index_in_block` (int32); the blocks held, oldest first, as
        `block_ids`, `block_first`, `block_count` (int64) and their compressed bytes
        concatenated in `block_data` (uint8), block `i` being
        `block_data[block_offsets[i] : block_offsets[i + 1]]`."""
        blocks = list(self._blocks.items())
        sizes = np.array([len(payload) for _, (_, _, payload) in blocks], dtype=np.int64)
        offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = np.empty(offsets[-1], np.uint8)  # one copy of the blocks, writable
        for i, (_, (_, _, payload)) in enumerate(blocks):
            data[offsets[i] : offsets[i + 1]] = np.frombuffer(payload, np.uint8)
        return {
            prefix + "kind": "zstd",
            prefix + "capacity": self.capacity,
            prefix + "byte_budget": self.byte_budget,
            prefix + "next": self._next,
            prefix + "oldest": self._oldest,
            prefix + "next_block": self._next_block,
            prefix + "block_of": self._block_of.copy() if copy else self._block_of,
            prefix + "index_in_block": (
                self._index_in_block.copy() if copy else self._index_in_block
            ),
            prefix + "block_ids": np.array([block for block, _ in blocks], dtype=np.int64),
            prefix + "block_first": np.array([b[0] for _, b in blocks], dtype=np.int64),
            prefix + "block_count": np.array([b[1] for _, b in blocks], dtype=np.int64),
            prefix + "block_offsets": offsets,
            prefix + "block_data": data,
        }

    def check_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Raises a ValueError naming the key unless `state` fits this store: same
        capacity and budget, and every kept frame found in a block held."""
        p = prefix
        _check_kind(state, p, "zstd")
        _check_capacity(state, p, self.capacity)
        budget = expect_int(state, p + "byte_budget")
        if budget != self.byte_budget:
            raise ValueError(
                f"replay state has a compressed frame budget of {budget} bytes "
                f"({p}byte_budget), this replay {self.byte_budget} (another "
                "frame_compression_ratio?)"
            )
        count = expect_int(state, p + "next", 0)
        oldest = expect_int(state, p + "oldest", max(0, count - self.capacity), count)
        next_block = expect_int(state, p + "next_block", 0)
        capacity = self.capacity
        block_of = expect_array(state, p + "block_of", (capacity,), np.int64)
        index_in_block = expect_array(state, p + "index_in_block", (capacity,), np.int32)
        ids = expect_array(state, p + "block_ids", None, np.int64)
        nb = ids.shape[0] if ids.ndim == 1 else -1
        if nb < 0:
            raise ValueError(f"replay state {p}block_ids must be 1-D, got shape {ids.shape}")
        first = expect_array(state, p + "block_first", (nb,), np.int64)
        frames = expect_array(state, p + "block_count", (nb,), np.int64)
        offsets = expect_array(state, p + "block_offsets", (nb + 1,), np.int64)
        data = expect_stored(state, p + "block_data", None, np.uint8)
        if len(data.shape) != 1 or offsets[0] != 0 or offsets[-1] != data.shape[0]:
            raise ValueError(
                f"replay state {p}block_offsets must run from 0 to the size of {p}block_data"
            )
        if (np.diff(offsets) <= 0).any() or (frames < 1).any():
            raise ValueError(f"replay state {p}blocks must each hold bytes and frames")
        if nb and ((np.diff(ids) <= 0).any() or ids[0] < 0 or ids[-1] >= next_block):
            raise ValueError(
                f"replay state {p}block_ids must increase and stay below {p}next_block"
            )
        if nb and ((first < 0).any() or (first + frames > count).any()):
            raise ValueError(f"replay state {p}blocks name frames never stored")
        kept = np.arange(oldest, count, dtype=np.int64)
        slots = kept % capacity
        position = np.searchsorted(ids, block_of[slots])
        found = position < nb
        found[found] = ids[position[found]] == block_of[slots[found]]
        if not found.all():
            raise ValueError(f"replay state {p}block_of names a block not held")
        start = first[position]
        if ((kept < start) | (kept >= start + frames[position])).any() or (
            kept - start != index_in_block[slots]
        ).any():
            raise ValueError(f"replay state {p}index_in_block does not match the blocks held")

    def restore_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Replaces the store's blocks with an exported state's (stored block bytes are
        read a slice at a time and cut into the blocks).

        Raises:
            ValueError: As `check_state`; the store is then unchanged.
        """
        self.check_state(state, prefix)
        p = prefix
        offsets = load_array(state[p + "block_offsets"])
        payloads = _cut(state[p + "block_data"], offsets)
        blocks: collections.OrderedDict[int, tuple[int, int, bytes]] = collections.OrderedDict()
        for block, first, count, payload in zip(
            load_array(state[p + "block_ids"]),
            load_array(state[p + "block_first"]),
            load_array(state[p + "block_count"]),
            payloads,
            strict=True,
        ):
            blocks[int(block)] = (int(first), int(count), payload)
        self._blocks = blocks
        self._block_bytes = int(offsets[-1]) + BLOCK_OVERHEAD * len(blocks)
        copy_into(self._block_of, state[p + "block_of"])
        copy_into(self._index_in_block, state[p + "index_in_block"])
        self._next = int(state[p + "next"])
        self._oldest = int(state[p + "oldest"])
        self._next_block = int(state[p + "next_block"])


def _cut(data: np.ndarray | StoredArray, offsets: np.ndarray) -> list[bytes]:
    """Block `i` of `data` is `data[offsets[i] : offsets[i + 1]]`: the blocks as bytes of
    their own length, `data` read a slice at a time."""
    payloads = []
    ends = offsets[1:].tolist()
    position = 0  # offset in `data` of the slice's first byte
    carry = b""  # the start of a block that the previous slice cut
    for chunk in iter_chunks(data):
        view = memoryview(np.ascontiguousarray(chunk)).cast("B")
        start = 0
        while len(payloads) < len(ends) and ends[len(payloads)] - position <= len(view):
            stop = ends[len(payloads)] - position
            payloads.append(carry + bytes(view[start:stop]))
            carry, start = b"", stop
        carry += bytes(view[start:])
        position += len(view)
    return payloads
