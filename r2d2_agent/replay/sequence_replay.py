"""`SequenceReplay`: R2D2's replay, storing every observation frame once.

Two stores, sized together:

* a frame store: a ring of `frame_capacity` frames (uint8 for images) plus one zero frame,
  addressed by a frame number that only grows (slot = number % frame_capacity);
* a `PrioritizedSequenceReplay` of `capacity` sequences holding each sequence's small
  fields and the frame numbers of its `T + S - 1` frames (`SequenceLayout`).

Overlapping windows and stacked observations share frames, so the replay keeps about
`period + 1` frames per sequence (1.025 frames per env step at the paper's settings)
instead of `(b + L + n) x S`. Stacks are rebuilt when sampled, exactly as the actor stacked
them (`stack_frames`; the learner does it in its graph).

Frames arrive in `SequenceRecord`s: each record brings the frames of its actor that no
earlier record brought, named by the actor's own frame ids; the replay maps each actor's
ids ("stream") to frame numbers. When a frame is overwritten, every sequence that uses it
is invalidated (never sampled again, its priority write-backs skipped). With the default
frame capacity the sequence ring overwrites a sequence before its frames, so this only
happens with many actors interleaving or an undersized frame store.

`export_state` hands out the whole replay (sequences, priorities, frames, the streams'
frame ids, the sampling generator) as flat numpy arrays and plain scalars, and
`restore_state` takes it back, so a checkpoint can hold the replay (no pickle).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from r2d2_agent.replay.adder import SequenceRecord
from r2d2_agent.replay.frame_store import CompressedFrameStore, RawFrameStore
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.prioritized import FieldSpec, PrioritizedSequenceReplay
from r2d2_agent.replay.state_io import (
    ReplayStateDict,
    expect_array,
    expect_float,
    expect_int,
    expect_str,
    load_array,
)

__all__ = ["REPLAY_STATE_FORMAT", "SequenceReplay", "default_frame_capacity"]

logger = logging.getLogger(__name__)

_NO_FRAME = np.iinfo(np.int64).max  # the "oldest frame" of a sequence without frames

REPLAY_STATE_FORMAT = ("r2d2-agent sequence replay", 1)
"""`format` and `format_version` of `SequenceReplay.export_state`."""

_LAYOUT_INTS = (
    "input_sequence",
    "state_size",
    "burnin",
    "input_length",
    "multisteps",
    "period",
    "prev_action_reward",
)


def default_frame_capacity(layout: SequenceLayout, capacity: int) -> int:
    """Frames to store for `capacity` sequences.

    An episode of `E` steps yields `ceil(E / period)` windows over `E + 1` frames, at most
    `period + 1` frames per window; a sequence also reaches back `burnin + S - 1` frames
    before its window, and each actor holds up to a sequence's worth of frames not yet
    sent. So `capacity * (period + 1)` frames plus a margin of 16 sequences' frames keep
    every stored sequence's frames in place in steady state.
    """
    return capacity * (layout.period + 1) + 16 * layout.frames_per_sequence


def make_frame_store(
    layout: SequenceLayout, frame_capacity: int, compression: str | None, ratio: float
) -> RawFrameStore | CompressedFrameStore:
    """The frame store a replay uses: raw, or zstd-compressed within a byte budget.

    Raises:
        ValueError: On an unknown compression or a ratio that is not > 0.
    """
    if compression is None:
        return RawFrameStore(layout.frame_shape, layout.frame_dtype, frame_capacity)
    if compression != "zstd":
        raise ValueError(f'compression must be None or "zstd", got {compression!r}')
    if not ratio > 0:
        raise ValueError(f"compression_ratio must be > 0, got {ratio!r}")
    budget = compressed_budget(layout, frame_capacity, ratio)
    return CompressedFrameStore(layout.frame_shape, layout.frame_dtype, frame_capacity, budget)


def compressed_budget(layout: SequenceLayout, frame_capacity: int, ratio: float) -> int:
    """Bytes the compressed blocks of a store may take: the raw frames over `ratio`."""
    return int(frame_capacity * layout.frame_nbytes / ratio)


def _log_dropped(dropped: int) -> None:
    """Logs the `dropped`-th sequence refused for frames already gone: a warning at the
    1st, 10th, 100th, ... (a replay whose frames do not fit refuses one per record), the
    others at debug level."""
    if str(dropped).rstrip("0") == "1":  # 1, 10, 100, ...
        logger.warning(
            "dropped a sequence whose frames were already overwritten (%d so far): the frame "
            "store holds too few frames (a frame_capacity below the default, or with "
            "frame_compression, frames compressing worse than frame_compression_ratio)",
            dropped,
        )
    else:
        logger.debug("dropped a sequence whose frames were already overwritten (%d)", dropped)


class _StreamIds:
    """Maps one stream's (actor's) frame ids to frame numbers, for its recent frames.

    Ids arrive modulo 2**31 (`FRAME_ID_MODULUS`); the window is a power of two, which
    divides 2**31, so `id % window` is the same before and after an id wraps around.
    """

    def __init__(self, span: int) -> None:
        window = self.window_for(span)
        self._numbers = np.full(window, -1, dtype=np.int64)
        self._window = window

    @staticmethod
    def window_for(span: int) -> int:
        """Ids remembered: a power of two of at least 4 sequences' frames."""
        return 1 << max(0, (4 * span - 1).bit_length())

    def put(self, first_id: int, numbers: np.ndarray) -> None:
        ids = first_id + np.arange(numbers.size)
        self._numbers[ids % self._window] = numbers

    def get(self, ids: np.ndarray) -> np.ndarray:
        return self._numbers[ids % self._window]

    @property
    def numbers(self) -> np.ndarray:
        """The frame number of each id modulo the window (-1: none yet)."""
        return self._numbers


class SequenceReplay:
    """Prioritized replay of R2D2 sequences whose frames are stored once.

    Args:
        layout: The sequence layout (frame shape and dtype, stacking, lengths).
        capacity: Sequences stored, at least 1 (`config.memory_capacity`).
        priority_exponent: `alpha` >= 0 of proportional prioritized sampling.
        seed: Seed of the sampling randomness.
        frame_capacity: Frames stored; `default_frame_capacity(layout, capacity)` when None.
        compression: None keeps frames raw; "zstd" compresses each record's new frames
            together (`CompressedFrameStore`, needs the zstandard package).
        compression_ratio: With compression, the store may take the raw size of
            `frame_capacity` frames divided by this; frames that compress worse leave early.

    Raises:
        ValueError: On an invalid capacity or exponent, an unknown compression, or a frame
            capacity too small to hold two sequences' frames.
        ImportError: For "zstd" without the zstandard package.
    """

    def __init__(
        self,
        layout: SequenceLayout,
        capacity: int,
        priority_exponent: float,
        seed: int | None = None,
        frame_capacity: int | None = None,
        compression: str | None = None,
        compression_ratio: float = 10.0,
    ) -> None:
        self.layout = layout
        spec = dict(layout.field_spec())
        spec["frame_ids"] = (spec["frame_ids"][0], np.dtype(np.int64))  # frame numbers here
        spec["oldest_frame"] = ((), np.dtype(np.int64))
        self._spec = spec
        self._sequences = PrioritizedSequenceReplay(capacity, spec, priority_exponent, seed)
        if frame_capacity is None:
            frame_capacity = default_frame_capacity(layout, capacity)
        if frame_capacity < 2 * layout.frames_per_sequence:
            raise ValueError(
                f"frame_capacity={frame_capacity} cannot hold the "
                f"{2 * layout.frames_per_sequence} frames of two sequences"
            )
        self.frame_capacity = int(frame_capacity)
        self._frames = make_frame_store(layout, self.frame_capacity, compression, compression_ratio)
        self.compression = compression
        self.compression_ratio = float(compression_ratio)
        self._streams: dict[int, _StreamIds] = {}
        self._oldest_live = _NO_FRAME  # lower bound of the live sequences' oldest frames
        self.dropped = 0
        """Sequences refused because one of their frames was already overwritten."""
        logger.debug(
            "SequenceReplay: %d sequences, %d frames of %d bytes (compression %s)",
            capacity,
            self.frame_capacity,
            layout.frame_nbytes,
            compression,
        )

    @property
    def capacity(self) -> int:
        """Maximum number of sequences stored."""
        return self._sequences.capacity

    @property
    def frames_stored(self) -> int:
        """Frames currently held."""
        return self._frames.next_number - self._frames.oldest_kept

    @property
    def frame_store_bytes(self) -> int:
        """Bytes the frame store holds (raw: allocated; compressed: blocks and index)."""
        return self._frames.nbytes

    @property
    def nbytes(self) -> int:
        """Bytes held for frames, sequence fields and priorities (raw frames: allocated at
        full capacity, pages not yet written are not resident; compressed: the blocks
        held now)."""
        return self._frames.nbytes + self._sequences.nbytes

    def __len__(self) -> int:
        """Number of sequences that can be sampled."""
        return len(self._sequences)

    # Adding ---------------------------------------------------------------------------

    def add(self, record: SequenceRecord, stream: int = 0) -> int | None:
        """Stores the record's new frames, then the sequence.

        Args:
            record: From a `SequenceAdder`; its frames continue the stream's frames.
            stream: Which adder the record comes from (an actor), so that its frame ids
                are told apart from other actors'.

        Returns:
            The sequence's key (see `PrioritizedSequenceReplay`), or None if one of its
            frames had already been overwritten (the sequence is dropped and counted in
            `dropped`; it does not happen with the default frame capacity).

        Raises:
            ValueError: If the record's frames or fields do not fit the layout.
        """
        frames = np.asarray(record.frames)
        if frames.shape[1:] != self.layout.frame_shape:
            raise ValueError(
                f"record frames have shape {frames.shape[1:]}, expected {self.layout.frame_shape}"
            )
        ids = self._stream(stream)
        if len(frames):
            ids.put(record.first_frame, self._store_frames(frames))
        local = np.asarray(record.fields["frame_ids"], dtype=np.int64)
        numbers = np.where(local >= 0, ids.get(np.maximum(local, 0)), -1)
        real = numbers[local >= 0]
        oldest = int(real.min()) if real.size else _NO_FRAME
        if real.size and (oldest < self._frames.oldest_kept or (real < 0).any()):
            self.dropped += 1
            _log_dropped(self.dropped)
            return None
        fields = dict(record.fields)
        fields["frame_ids"] = numbers
        fields["oldest_frame"] = np.int64(oldest)
        key = self._sequences.add(fields, record.priority)
        self._oldest_live = min(self._oldest_live, oldest)
        return key

    def _stream(self, stream: int) -> _StreamIds:
        ids = self._streams.get(stream)
        if ids is None:
            ids = self._streams[stream] = _StreamIds(self.layout.frames_per_sequence)
        return ids

    def _store_frames(self, frames: np.ndarray) -> np.ndarray:
        """Keeps frames; returns their numbers; invalidates the sequences they evict."""
        numbers = self._frames.store(frames)
        self._evict(self._frames.oldest_kept)
        return numbers

    def _evict(self, oldest_kept: int) -> None:
        """Invalidates the sequences that use a frame older than `oldest_kept`."""
        if oldest_kept <= self._oldest_live:
            return
        oldest = self._sequences.column("oldest_frame")
        live = self._sequences.live
        stale = np.flatnonzero(live & (oldest < oldest_kept))
        if stale.size:
            self._sequences.invalidate(stale)
        remaining = oldest[self._sequences.live]
        self._oldest_live = int(remaining.min()) if remaining.size else _NO_FRAME

    # Sampling and priorities ----------------------------------------------------------

    def sample(self, batch_size: int) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Draws a stratified, priority-proportional batch (with replacement).

        Returns:
            `(keys, batch, probabilities)`, as `PrioritizedSequenceReplay.sample`; `batch`
            holds the layout's fields except `frame_ids`, plus `frames`, `(B, T + S - 1,
            *frame)` in the storage dtype (zeros where a frame id is -1): observation `p`
            of row `i` is `stack_frames(frames[i], obs_mask[i], S)[p]`.
        """
        keys, batch, probabilities = self._sequences.sample(batch_size)
        numbers = batch.pop("frame_ids")
        del batch["oldest_frame"]
        batch["frames"] = self._frames.gather(numbers)
        return keys, batch, probabilities

    def batch_spec(self) -> FieldSpec:
        """Field name -> `(shape, dtype)` of one row of the batch `sample` returns (the
        batch's arrays add a leading batch dimension): what the learner's update graph is
        traced for before any sequence arrives."""
        layout = self.layout
        spec = {name: v for name, v in layout.field_spec().items() if name != "frame_ids"}
        spec["frames"] = ((layout.frames_per_sequence, *layout.frame_shape), layout.frame_dtype)
        return spec

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> int:
        """See `PrioritizedSequenceReplay.update_priorities` (stale keys are skipped)."""
        return self._sequences.update_priorities(keys, priorities)

    # Export and restore ---------------------------------------------------------------

    def export_state(self, copy: bool = True) -> ReplayStateDict:
        """The whole replay as flat numpy arrays and plain scalars (no Python objects).

        Restored with `restore_state` into a replay of the same layout and sizes, it
        samples exactly as this one would (same items, priorities, keys and generator).
        Keys: `format`, `format_version`; the summary `capacity`, `size` (sequences that
        can be sampled), `frame_capacity`, `compression` ("" or "zstd"),
        `compression_ratio`, `priority_exponent`, `dropped`, and the
        layout as `layout.<field>` (`layout.frame_shape` as JSON text,
        `layout.frame_dtype` as numpy's dtype string); `streams.ids` and
        `streams.numbers`, each actor stream's map from frame ids to frame numbers;
        `sequences.*` (`PrioritizedSequenceReplay.export_state`) and `frames.*` (the frame
        store's `export_state`).

        Args:
            copy: Copy the big arrays. False gives views of the replay's storage, valid
                only until it changes (enough to write them to a file at once, without
                holding the replay twice in memory).
        """
        layout = self.layout
        streams = sorted(self._streams)
        window = self._stream_window()
        numbers = np.full((len(streams), window), -1, dtype=np.int64)
        for row, stream in enumerate(streams):
            numbers[row] = self._streams[stream].numbers
        state: ReplayStateDict = {
            "format": REPLAY_STATE_FORMAT[0],
            "format_version": REPLAY_STATE_FORMAT[1],
            "capacity": self.capacity,
            "size": len(self),
            "frame_capacity": self.frame_capacity,
            "compression": self.compression or "",
            "compression_ratio": self.compression_ratio,
            "priority_exponent": self._sequences.priority_exponent,
            "dropped": self.dropped,
            "layout.frame_shape": json.dumps(list(layout.frame_shape)),
            "layout.frame_dtype": layout.frame_dtype.str,
            **{f"layout.{name}": int(getattr(layout, name)) for name in _LAYOUT_INTS},
            "streams.ids": np.array(streams, dtype=np.int64),
            "streams.numbers": numbers,
        }
        state.update(self._sequences.export_state("sequences.", copy))
        state.update(self._frames.export_state("frames.", copy))
        return state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Raises unless `state` (from `export_state`) fits this replay.

        Raises:
            ValueError: Naming the key and both values: another format, layout (frame
                shape or dtype, sequence lengths, stacking, LSTM size), capacity, frame
                capacity, compression or priority exponent, or arrays of the wrong shape
                or dtype, or values that contradict each other.
        """
        fmt = (expect_str(state, "format"), expect_int(state, "format_version"))
        if fmt[0] != REPLAY_STATE_FORMAT[0] or fmt[1] > REPLAY_STATE_FORMAT[1]:
            raise ValueError(
                f"replay state has format {fmt}, this library reads {REPLAY_STATE_FORMAT}"
            )
        layout = self.layout
        try:
            frame_shape = tuple(json.loads(expect_str(state, "layout.frame_shape")))
            frame_dtype = np.dtype(expect_str(state, "layout.frame_dtype"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"replay state layout.frame_shape/frame_dtype: {exc}") from exc
        mine = {
            "layout.frame_shape": (frame_shape, layout.frame_shape),
            "layout.frame_dtype": (frame_dtype, layout.frame_dtype),
            **{
                f"layout.{name}": (expect_int(state, f"layout.{name}"), int(getattr(layout, name)))
                for name in _LAYOUT_INTS
            },
            "capacity": (expect_int(state, "capacity"), self.capacity),
            "frame_capacity": (expect_int(state, "frame_capacity"), self.frame_capacity),
            "compression": (expect_str(state, "compression"), self.compression or ""),
            "priority_exponent": (
                expect_float(state, "priority_exponent"),
                self._sequences.priority_exponent,
            ),
        }
        if self.compression:
            ratio = expect_float(state, "compression_ratio")
            mine["compression_ratio"] = (ratio, self.compression_ratio)
        wrong = [
            f"{key}: {old!r} in the state, {new!r} here"
            for key, (old, new) in mine.items()
            if old != new
        ]
        if wrong:
            raise ValueError(
                "replay state was exported by another replay (" + "; ".join(wrong) + ")"
            )
        expect_int(state, "dropped", 0)
        ids = expect_array(state, "streams.ids", None, np.int64)
        if ids.ndim != 1 or np.unique(ids).size != ids.size:
            raise ValueError("replay state streams.ids must be distinct stream numbers")
        numbers = expect_array(
            state, "streams.numbers", (ids.size, self._stream_window()), np.int64
        )
        self._sequences.check_state(state, "sequences.")
        self._frames.check_state(state, "frames.")
        count = expect_int(state, "frames.next")
        if numbers.size and numbers.max() >= count:
            raise ValueError("replay state streams.numbers name frames never stored")
        live = load_array(state["sequences.live"])[: expect_int(state, "sequences.size")]
        frame_ids = load_array(state["sequences.items.frame_ids"])[live]
        oldest = load_array(state["sequences.items.oldest_frame"])[live]
        if self.compression:
            oldest_kept = expect_int(state, "frames.oldest")
        else:
            oldest_kept = max(0, count - self.frame_capacity)
        if frame_ids.size and (frame_ids.max() >= count or (oldest < oldest_kept).any()):
            raise ValueError(
                "replay state sequences.items.frame_ids name frames the frame store does not hold"
            )
        if expect_int(state, "size") != expect_int(state, "sequences.count"):
            raise ValueError("replay state size differs from sequences.count")

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Replaces the replay's contents with an exported state (`export_state`):
        sequences, sum-tree priorities, keys' generations, write cursors, frames, the
        streams' frame ids and the sampling generator.

        The state's arrays may be `StoredArray`s (`ReplaySnapshot.state()` of a
        checkpoint): they are read straight into the replay's own arrays, so a restore
        holds the replay once, not twice.

        Raises:
            ValueError: As `check_state`; the replay is then unchanged.
            Exception: Whatever reading a stored array raises (e.g. a checkpoint's
                `CorruptCheckpointError` for a failed checksum); the replay is then empty.
        """
        self.check_state(state)
        try:
            self._sequences.restore_state(state, "sequences.")
            self._frames.restore_state(state, "frames.")
        except BaseException:
            self._clear()
            raise
        self._streams = {}
        for stream, numbers in zip(
            load_array(state["streams.ids"]), load_array(state["streams.numbers"]), strict=True
        ):
            self._stream(int(stream)).numbers[:] = numbers
        self.dropped = int(state["dropped"])
        oldest = self._sequences.column("oldest_frame")[self._sequences.live]
        self._oldest_live = int(oldest.min()) if oldest.size else _NO_FRAME
        logger.debug("SequenceReplay: restored %d sequences", len(self))

    def _clear(self) -> None:
        """Empties the replay (same sizes and settings; a new sampling generator)."""
        self._sequences = PrioritizedSequenceReplay(
            self.capacity, self._spec, self._sequences.priority_exponent
        )
        self._frames = make_frame_store(
            self.layout, self.frame_capacity, self.compression, self.compression_ratio
        )
        self._streams = {}
        self._oldest_live = _NO_FRAME
        self.dropped = 0

    def _stream_window(self) -> int:
        return _StreamIds.window_for(self.layout.frames_per_sequence)
