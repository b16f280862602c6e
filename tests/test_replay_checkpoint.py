"""The replay memory in a checkpoint: `SequenceReplay.export_state`/`restore_state`, the
`/replay` group of a checkpoint file, and `R2D2Learner.save(replay=True)`/`restore`.

A replay filled past its capacity (its sequence ring and its frame store both wrapped
around, some sequences invalidated) goes through a checkpoint file and into a new replay,
which must then hold the same priorities and draw the same batches; corrupted or
mismatching replays are refused with errors naming the file and the field.
"""

from __future__ import annotations

import os
import pickle
import tracemalloc

import h5py
import numpy as np
import pytest

from r2d2_agent.checkpoints import (
    CheckpointError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    ReplaySnapshot,
    TrainingCounters,
    TrainingState,
    check_compatible,
    h5format,
    read_checkpoint,
    write_checkpoint,
)
from r2d2_agent.checkpoints.compatibility import config_as_data
from r2d2_agent.config import InputType
from r2d2_agent.replay import SequenceAdder, SequenceLayout, SequenceReplay
from r2d2_agent.roles import R2D2Builder

CAPACITY = 16
EPISODES = [3, 12, 1, 7, 20, 5, 9, 14, 2, 11] * 3  # about 70 sequences into 16 slots
COMPRESSION = pytest.mark.parametrize("compression", [None, "zstd"], ids=["raw", "zstd"])


@pytest.fixture(scope="module")
def config(make_config):
    return make_config(memory_capacity=CAPACITY)


def play(
    add,
    layout: SequenceLayout,
    nb_actions: int,
    episodes: list[int],
    seed: int,
    noise: bool = False,
) -> None:
    """Random episodes of frames `k, k+1, ...` (k counts frames; with `noise`, random
    bytes, which do not compress) through a `SequenceAdder` whose records go to `add`."""
    rng = np.random.default_rng(seed)
    adder = SequenceAdder(add, layout, gamma=0.99, priority_eta=0.9, rescaling=True)
    count = 0

    def frame() -> np.ndarray:
        nonlocal count
        count += 1
        if noise:
            return rng.integers(0, 100, layout.frame_shape).astype(layout.frame_dtype)
        return np.full(layout.frame_shape, count % 100, layout.frame_dtype)

    for length in episodes:
        adder.add_first(frame())
        for t in range(length):
            adder.add(
                int(rng.integers(nb_actions)),
                float(rng.normal()),
                frame(),
                terminated=t == length - 1,
                truncated=False,
                state=rng.normal(size=(2, layout.state_size)).astype(np.float32),
                q_values=rng.normal(size=nb_actions),
            )


def make_replay(config, compression, seed: int = 5) -> SequenceReplay:
    """A replay of 16 sequences and only 3 sequences' frames (the frames wrap too).

    Compressed, its budget is ten times the raw frames: a block of a few 16-byte frames
    costs more than they do (`BLOCK_OVERHEAD`), and the frames should wrap, not leave
    early for the budget."""
    layout = SequenceLayout.from_config(config)
    return SequenceReplay(
        layout,
        CAPACITY,
        config.priority_exponent,
        seed=seed,
        frame_capacity=3 * layout.frames_per_sequence,
        compression=compression,
        compression_ratio=0.1,
    )


def filled_replay(config, compression, noise: bool = False) -> SequenceReplay:
    """A wrapped-around replay whose priorities were updated after sampling."""
    replay = make_replay(config, compression)
    play(replay.add, replay.layout, config.nb_actions, EPISODES, seed=1, noise=noise)
    keys, _, _ = replay.sample(8)
    replay.update_priorities(keys, np.linspace(0.1, 3.0, 8))
    return replay


def state_with(config, replay: SequenceReplay | None) -> TrainingState:
    """A small hand-made training state (no TensorFlow), with the replay if given."""
    arrays = [np.full((3,), i, np.float32) for i in range(2)]
    return TrainingState(
        online_weights=arrays,
        target_weights=arrays,
        optimizer_weights=[np.array(4, np.int64)],
        weight_names=("w0", "w1"),
        optimizer_names=("iteration",),
        counters=TrainingCounters(env_steps=500, learner_updates=4, sequences_received=70),
        config=config_as_data(config),
        library_version="0.1.0",
        replay=None if replay is None else ReplaySnapshot.from_state(replay.export_state()),
    )


def samples_alike(replay: SequenceReplay, other: SequenceReplay) -> bool:
    """Whether both draw the same batch (keys, fields, frames) now."""
    keys, batch, _ = replay.sample(32)
    keys2, batch2, _ = other.sample(32)
    return np.array_equal(keys, keys2) and all(
        np.array_equal(batch[name], batch2[name]) for name in batch
    )


def through_a_file(config, replay: SequenceReplay, compression, tmp_path) -> SequenceReplay:
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, replay))
    restored = make_replay(config, compression, seed=6)  # the generator's state is restored
    restored.restore_state(read_checkpoint(path).replay.load())
    return restored


# ----------------------------------------------------------------- round trip -------
@COMPRESSION
def test_a_wrapped_replay_restored_from_a_checkpoint_has_the_same_priorities(
    config, compression, tmp_path
):
    replay = filled_replay(config, compression)
    exported = replay.export_state()
    assert exported["sequences.generation"].min() >= 1  # every slot written at least twice
    assert replay.frames_stored == replay.frame_capacity < exported["frames.next"]
    restored = through_a_file(config, replay, compression, tmp_path)
    before, after = replay.export_state(), restored.export_state()
    assert len(restored) == len(replay) > 0
    for key in ("sequences.leaves", "sequences.generation", "sequences.live"):
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)


@COMPRESSION
def test_a_wrapped_replay_restored_from_a_checkpoint_samples_the_same_batches(
    config, compression, tmp_path
):
    replay = filled_replay(config, compression)
    restored = through_a_file(config, replay, compression, tmp_path)
    for round_ in range(3):
        keys, batch, probabilities = replay.sample(32)
        keys2, batch2, probabilities2 = restored.sample(32)
        np.testing.assert_array_equal(keys2, keys)
        np.testing.assert_array_equal(probabilities2, probabilities)
        assert batch2.keys() == batch.keys()
        for name in batch:
            np.testing.assert_array_equal(batch2[name], batch[name], err_msg=name)
        new = np.linspace(0.5, 2.0, 32) * (round_ + 1)
        assert restored.update_priorities(keys, new) == replay.update_priorities(keys, new)


@COMPRESSION
def test_a_restored_replay_goes_on_storing_as_the_original(config, compression, tmp_path):
    replay = filled_replay(config, compression)
    restored = through_a_file(config, replay, compression, tmp_path)
    for target in (replay, restored):
        play(target.add, target.layout, config.nb_actions, [6, 15, 4], seed=2)
    keys, batch, _ = replay.sample(32)
    keys2, batch2, _ = restored.sample(32)
    np.testing.assert_array_equal(keys2, keys)
    np.testing.assert_array_equal(batch2["frames"], batch["frames"])


def test_an_empty_replay_round_trips(config, tmp_path):
    restored = through_a_file(config, make_replay(config, None), None, tmp_path)
    assert len(restored) == 0 and restored.frames_stored == 0


# ----------------------------------------------------------------- memory -----------
@COMPRESSION
def test_restoring_a_replay_from_a_file_holds_it_once_not_twice(
    make_config, compression, tmp_path, monkeypatch
):
    """What the learner restores, `read_checkpoint(path).replay.state()`, leaves the arrays
    in the file: `restore_state` reads them a slice at a time straight into the replay's
    own, instead of reading a whole copy first. Beyond the blocks a compressed store
    keeps, the restore allocates (tracemalloc) a few slices, far from a copy."""
    monkeypatch.setattr(h5format, "CHUNK_BYTES", 4096)
    config = make_config(
        input_shape=(84, 84), input_type=InputType.GRAY_2ch, memory_capacity=CAPACITY
    )
    replay = filled_replay(config, compression, noise=True)
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, replay))
    snapshot = read_checkpoint(path).replay
    restored = make_replay(config, compression, seed=6)
    tracemalloc.start()
    try:
        restored.restore_state(snapshot.state())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    kept_blocks = restored.frame_store_bytes if compression else 0
    assert snapshot.nbytes > 200_000
    assert peak - kept_blocks < snapshot.nbytes / 4
    assert samples_alike(replay, restored)


def test_a_replay_damaged_after_the_check_leaves_the_restored_replay_empty(config, tmp_path):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, filled_replay(config, None)))
    replay_state = read_checkpoint(path).replay.state()
    with h5py.File(path, "r") as file:
        offset = file["replay/frames.rows"].id.get_offset()
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(b"\xff\xff\xff\xff")
    restored = make_replay(config, None)
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: replay/frames"):
        restored.restore_state(replay_state)
    assert len(restored) == 0 and restored.frames_stored == 0


# ----------------------------------------------------------------- the file ---------
def test_a_checkpoint_without_replay_still_loads(config, tmp_path):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, None))
    state = read_checkpoint(path)
    assert state.replay is None and state.counters.learner_updates == 4


def test_the_replay_is_stored_as_checksummed_datasets_without_objects(config, tmp_path):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, filled_replay(config, "zstd")))
    with h5py.File(path, "r") as file:
        datasets = list(file["replay"].values())
        assert "sequences.leaves" in file["replay"] and "frames.block_data" in file["replay"]
        assert all("crc32" in d.attrs and d.dtype.kind in "biuf" for d in datasets)


def test_a_corrupted_replay_dataset_is_refused_naming_the_file(config, tmp_path):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, filled_replay(config, None)))
    with h5py.File(path, "r") as file:
        offset = file["replay/sequences.leaves"].id.get_offset()
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(b"\xff\xff\xff\xff")
    with pytest.raises(
        CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: replay/sequences\.leaves"
    ):
        read_checkpoint(path)


def test_a_replay_corrupted_after_the_check_is_refused_when_loaded(config, tmp_path):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, filled_replay(config, None)))
    state = read_checkpoint(path)
    with h5py.File(path, "r") as file:
        offset = file["replay/frames.rows"].id.get_offset()
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(b"\xff\xff\xff\xff")
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: replay/frames"):
        state.replay.load()


def test_a_state_read_from_a_file_travels_without_the_replay_arrays(config, tmp_path):
    replay = filled_replay(config, None)
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, replay))
    state = read_checkpoint(path)
    payload = pickle.dumps(state)
    assert len(payload) < state.replay.nbytes
    received = pickle.loads(payload).replay.load()
    np.testing.assert_array_equal(received["frames.rows"], replay.export_state()["frames.rows"])


def test_a_replay_of_another_memory_capacity_is_incompatible_naming_it(config):
    state = state_with(config, make_replay(config, None))
    with pytest.raises(
        IncompatibleCheckpointError, match="memory_capacity: 16 in the checkpoint's replay, 32"
    ):
        check_compatible(state, config.replace(memory_capacity=32))


def test_weights_of_a_checkpoint_with_another_replay_still_load(config):
    state = state_with(config, make_replay(config, None))
    check_compatible(state, config.replace(memory_capacity=32), replay=False)


# ----------------------------------------------------------------- damaged files ----
def flip_unique(path, pattern: bytes, at: int = 0) -> None:
    """Flips byte `at` of `pattern`, which the file must hold exactly once."""
    data = bytearray(open(path, "rb").read())
    assert data.count(pattern) == 1, pattern
    data[data.index(pattern) + at] ^= 0xFF
    open(path, "wb").write(data)


def test_a_checkpoint_whose_replay_group_lost_its_name_is_refused_not_loaded_without_it(
    config, tmp_path
):
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, filled_replay(config, None)))
    flip_unique(path, b"\0replay\0", at=1)  # the link /replay, in HDF5's heap of names
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: its metadata"):
        read_checkpoint(path)


def test_a_damaged_replay_scalar_is_refused(config, tmp_path):
    replay = filled_replay(config, None)
    replay.dropped = 987_654_321  # a value found once in the file
    path = write_checkpoint(tmp_path / "ckpt.h5", state_with(config, replay))
    flip_unique(path, np.int64(987_654_321).tobytes())
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: its metadata"):
        read_checkpoint(path)


def _regions(path) -> list[tuple[int, int]]:
    """(start, end) of every dataset's bytes and of every range of the file around them
    (the header, HDF5's structure, the attributes)."""
    extents = []
    with h5py.File(path, "r") as file:

        def visit(_, item):
            if isinstance(item, h5py.Dataset) and item.id.get_storage_size():
                extents.append((item.id.get_offset(), item.id.get_storage_size()))

        file.visititems(visit)
    bounds = sorted({0, os.path.getsize(path)} | {b for o, n in extents for b in (o, o + n)})
    return list(zip(bounds[:-1], bounds[1:], strict=False))


def _fuzz_offsets(path, random_count: int, seed: int) -> list[int]:
    """The first, middle and last byte of every region, every 8th byte of the first 1 KB
    (the header and HDF5's superblock), and `random_count` offsets drawn with `seed`."""
    size = os.path.getsize(path)
    chosen = {
        offset for start, end in _regions(path) for offset in (start, (start + end) // 2, end - 1)
    }
    chosen |= set(range(0, min(size, 1024), 8))
    chosen |= {int(o) for o in np.random.default_rng(seed).integers(0, size, random_count)}
    return sorted(chosen)


def _same_state(read: TrainingState, written: TrainingState) -> bool:
    for name in ("online_weights", "target_weights", "optimizer_weights"):
        mine, theirs = getattr(read, name), getattr(written, name)
        if len(mine) != len(theirs) or not all(
            a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True)
        ):
            return False
    return all(
        getattr(read, name) == getattr(written, name)
        for name in ("weight_names", "optimizer_names", "counters", "config", "library_version")
    )


def _same_replay(read: dict, written: dict) -> bool:
    return read.keys() == written.keys() and all(
        np.array_equal(value, written[key])
        and getattr(value, "dtype", None) == getattr(written[key], "dtype", None)
        if isinstance(value, np.ndarray)
        else value == written[key] and type(value) is type(written[key])
        for key, value in read.items()
    )


@COMPRESSION
def test_every_byte_flip_in_a_checkpoint_is_refused_or_loads_identically(
    config, compression, tmp_path
):
    """Flips one byte at a time across a whole checkpoint with a replay: each load gives
    exactly what was written (weights, optimizer, counters, config, the replay read whole
    and restored as the learner does) or is refused with a `CheckpointError` naming the
    file, never anything else."""
    replay = filled_replay(config, compression)
    written = state_with(config, replay)
    written_replay = replay.export_state()
    path = write_checkpoint(tmp_path / "ckpt.h5", written)
    original = open(path, "rb").read()
    damaged = tmp_path / "damaged.h5"
    wrong = []
    offsets = _fuzz_offsets(path, random_count=60, seed=0)
    for offset in offsets:
        data = bytearray(original)
        data[offset] ^= 0xFF
        damaged.write_bytes(data)
        try:
            state = read_checkpoint(damaged)
            loaded = state.replay.load() if state.replay is not None else None
            if loaded is not None:  # as the learner restores it
                restored = make_replay(config, compression, seed=6)
                restored.restore_state(state.replay.state())
        except CheckpointError as exc:
            if exc.path != str(damaged) or str(damaged) not in str(exc):
                wrong.append((offset, f"{exc!r} does not name the file"))
            continue
        except Exception as exc:  # noqa: BLE001  (what the test looks for)
            wrong.append((offset, repr(exc)))
            continue
        if not _same_state(state, written) or loaded is None:
            wrong.append((offset, "loaded other weights, counters or config, or no replay"))
        elif not _same_replay(loaded, written_replay):
            wrong.append((offset, "loaded another replay"))
        elif not _same_replay(restored.export_state(), written_replay):
            wrong.append((offset, "restored another replay"))
    assert len(offsets) > 200
    assert not wrong, f"{len(wrong)} of {len(offsets)} flips: {wrong[:5]}"


# ----------------------------------------------------------------- validation -------
def test_restore_refuses_an_array_of_another_dtype_naming_it_and_changes_nothing(config):
    replay = filled_replay(config, None)
    state = replay.export_state()
    state["sequences.items.actions"] = state["sequences.items.actions"].astype(np.int64)
    target = make_replay(config, None)
    with pytest.raises(ValueError, match="'sequences.items.actions' has dtype int64"):
        target.restore_state(state)
    assert len(target) == 0 and target.frames_stored == 0


def test_restore_refuses_a_replay_of_another_capacity_naming_it(config):
    state = filled_replay(config, None).export_state()
    other = SequenceReplay(SequenceLayout.from_config(config), 32, config.priority_exponent)
    with pytest.raises(ValueError, match=r"capacity: 16 in the state, 32 here"):
        other.restore_state(state)


def test_restore_refuses_a_compressed_state_in_a_raw_replay(config):
    state = filled_replay(config, "zstd").export_state()
    with pytest.raises(ValueError, match="compression: 'zstd' in the state, '' here"):
        make_replay(config, None).restore_state(state)


# ----------------------------------------------------------------- the learner ------
@pytest.fixture(scope="module")
def learners(config, tmp_path_factory):
    """Learner A with a filled replay, saved with and without it; learners B and C (other
    seed) restore the two files."""
    directory = tmp_path_factory.mktemp("learners")
    a = R2D2Builder(config).make_learner()
    play(a.add, a.replay.layout, config.nb_actions, EPISODES, seed=3)
    with_replay = write_checkpoint(directory / "with.h5", a.save(replay=True))
    without = write_checkpoint(directory / "without.h5", a.save())
    b = R2D2Builder(config.replace(seed=9)).make_learner()
    b.restore(read_checkpoint(with_replay))
    c = R2D2Builder(config.replace(seed=9)).make_learner()
    c.restore(read_checkpoint(without))
    return a, b, c


def test_a_learner_restored_with_replay_samples_what_the_saved_one_would(learners):
    a, b, _ = learners
    assert len(b.replay) == len(a.replay) > 0 and b.ready
    keys, batch, _ = a.replay.sample(8)
    keys2, batch2, _ = b.replay.sample(8)
    np.testing.assert_array_equal(keys2, keys)
    np.testing.assert_array_equal(batch2["frames"], batch["frames"])


def test_a_learner_restored_without_replay_starts_with_an_empty_one(learners):
    a, _, c = learners
    assert len(c.replay) == 0 and c.sequences_added == a.sequences_added > 0
