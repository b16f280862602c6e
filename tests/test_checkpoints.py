"""Tests of `r2d2_agent.checkpoints` and `R2D2Learner.save`/`restore`: the file format, the
atomic write, the errors for missing, truncated, corrupted and incompatible files, and a
learner resumed from a checkpoint updating exactly like the one that wrote it.

The learner tests share one pair of tiny learners (tracing the LSTM update takes seconds).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from r2d2_agent.checkpoints import (
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    MissingCheckpointError,
    TrainingCounters,
    TrainingState,
    check_compatible,
    checkpoint_files,
    checkpoint_name,
    latest_checkpoint,
    prune_checkpoints,
    read_checkpoint,
    spread_counts,
    write_checkpoint,
)
from r2d2_agent.checkpoints.compatibility import config_as_data
from r2d2_agent.replay import SequenceLayout
from r2d2_agent.roles import R2D2Builder


def make_state(config, n_arrays=3, size=8, updates=7, path=None) -> TrainingState:
    """A small hand-made state (no TensorFlow): arrays 0..n-1 filled with their index."""
    arrays = [np.full((size,), i, np.float32) for i in range(n_arrays)]
    return TrainingState(
        online_weights=arrays,
        target_weights=[a + 100 for a in arrays],
        optimizer_weights=[np.array(updates, np.int64), *[a * 0.5 for a in arrays]],
        weight_names=tuple(f"w{i}" for i in range(n_arrays)),
        optimizer_names=("iteration", *(f"m{i}" for i in range(n_arrays))),
        counters=TrainingCounters(
            env_steps=1000,
            learner_updates=updates,
            episodes=40,
            sequences_received=90,
            actor_env_steps=(600, 400),
            actor_episodes=(25, 15),
        ),
        config=config_as_data(config),
        library_version="0.1.0",
        path=path,
    )


@pytest.fixture(scope="module")
def config(make_config):
    return make_config()


@pytest.fixture
def written(config, tmp_path):
    """A checkpoint file of `make_state` and the state."""
    state = make_state(config)
    path = write_checkpoint(tmp_path / "ckpt.h5", state)
    return path, state


# ----------------------------------------------------------------- round trip -------
def test_read_checkpoint_returns_the_arrays_written(written):
    path, state = written
    read = read_checkpoint(path)
    for field in ("online_weights", "target_weights", "optimizer_weights"):
        for a, b in zip(getattr(read, field), getattr(state, field), strict=True):
            np.testing.assert_array_equal(a, b)
            assert a.shape == b.shape and a.dtype == b.dtype


def test_read_checkpoint_returns_the_counters_written(written):
    path, state = written
    assert read_checkpoint(path).counters == state.counters


def test_read_checkpoint_returns_the_config_version_and_its_path(written, config):
    path, _ = written
    read = read_checkpoint(path)
    assert read.config == config_as_data(config)
    assert read.library_version == "0.1.0" and read.path == path


def test_a_checkpoint_directory_resolves_to_its_highest_numbered_file(config, tmp_path):
    for n in (5, 40, 12):
        write_checkpoint(tmp_path / checkpoint_name(n), make_state(config, updates=n))
    assert read_checkpoint(tmp_path).counters.learner_updates == 40
    assert latest_checkpoint(tmp_path) == str(tmp_path / checkpoint_name(40))


def test_prune_keeps_the_last_k_checkpoints(config, tmp_path):
    for n in range(1, 6):
        write_checkpoint(tmp_path / checkpoint_name(n), make_state(config))
    prune_checkpoints(tmp_path, keep=2)
    assert [n for n, _ in checkpoint_files(tmp_path)] == [4, 5]


def test_write_leaves_no_temporary_file(written, tmp_path):
    assert os.listdir(tmp_path) == ["ckpt.h5"]


def test_with_weights_replaces_online_and_target_and_keeps_the_rest(written):
    state = read_checkpoint(written[0])
    new = [np.full((8,), 7.0 + i, np.float32) for i in range(3)]
    other = state.with_weights(new)
    new[0][:] = -1.0  # the state holds copies
    for array, i in zip(other.online_weights, range(3), strict=True):
        np.testing.assert_array_equal(array, np.full((8,), 7.0 + i))
    for a, b in zip(other.online_weights, other.target_weights, strict=True):
        np.testing.assert_array_equal(a, b)
    assert other.optimizer_names == state.optimizer_names
    assert other.counters == state.counters and other.config == state.config
    assert other.path is None and other.replay is None


@pytest.mark.parametrize(
    "weights, message",
    [
        ([np.zeros(8, np.float32)] * 2, "2 weight arrays for a network of 3"),
        ([np.zeros(8), np.zeros(9), np.zeros(8)], r"weight w1: shape \(9,\), the network's \(8,\)"),
    ],
)
def test_with_weights_of_another_network_is_refused_naming_it(written, weights, message):
    with pytest.raises(ValueError, match=message):
        read_checkpoint(written[0]).with_weights(weights)


@pytest.mark.parametrize(
    ("per_actor", "total", "actors", "expected"),
    [
        ((600, 400), 1000, 2, [600, 400]),  # same actors: each keeps its own
        ((600, 400, 50), 1050, 2, [650, 400]),  # fewer actors: actor 2's steps go to 0
        ((600, 400), 1000, 3, [600, 400, 0]),  # more actors: the new one starts at 0
        ((), 300, 2, [300, 0]),  # the single-process agent's total only
    ],
)
def test_spread_counts_keeps_the_sum_and_each_actors_count(per_actor, total, actors, expected):
    assert spread_counts(per_actor, total, actors) == expected


# ----------------------------------------------------------------- clear errors -----
def test_missing_checkpoint_raises_file_not_found_naming_it(tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(FileNotFoundError, match="nope.h5 does not exist") as info:
        read_checkpoint(missing)
    assert isinstance(info.value, MissingCheckpointError)


def test_directory_without_checkpoints_is_refused_naming_it(tmp_path):
    with pytest.raises(MissingCheckpointError, match="holds no checkpoint"):
        read_checkpoint(tmp_path)


def test_truncated_checkpoint_is_refused_naming_the_file_and_what_to_do(written):
    path, _ = written
    with open(path, "r+b") as file:
        file.truncate(200)
    with pytest.raises(OSError, match=r"ckpt\.h5 cannot be read: it is truncated") as info:
        read_checkpoint(path)
    assert isinstance(info.value, CorruptCheckpointError)
    assert "earlier checkpoint" in str(info.value)


def test_corrupted_weights_fail_their_checksum(written):
    path, _ = written
    with h5py.File(path, "r") as file:
        offset = file["online/0001"].id.get_offset()  # where the array's bytes are
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(b"\xff\xff\xff\xff")
    with pytest.raises(CorruptCheckpointError, match=r"online/0001 \(w1\) fails its checksum"):
        read_checkpoint(path)


def test_a_file_that_is_not_hdf5_is_refused_naming_it(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("not a checkpoint")
    with pytest.raises(CorruptCheckpointError, match="notes.h5 cannot be read"):
        read_checkpoint(path)


def test_an_hdf5_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as file:
        file["x"] = np.zeros(3)
    with pytest.raises(CorruptCheckpointError, match="not an r2d2-agent checkpoint"):
        read_checkpoint(path)


def test_incompatible_checkpoint_names_every_mismatching_field(written, config):
    path, _ = written
    other = config.replace(nb_actions=3, lstm_units=16)
    with pytest.raises(
        ValueError, match="nb_actions: 2 in the checkpoint, 3 in this config"
    ) as info:
        check_compatible(read_checkpoint(path), other)
    assert isinstance(info.value, IncompatibleCheckpointError)
    assert set(info.value.mismatches) == {"nb_actions", "lstm_units"}
    assert "ckpt.h5" in str(info.value)


def test_a_checkpoint_without_the_previous_action_input_is_refused_with_it(written, config):
    path, _ = written
    with pytest.raises(IncompatibleCheckpointError, match="enable_prev_action_reward"):
        check_compatible(read_checkpoint(path), config.replace(enable_prev_action_reward=True))


def test_a_changed_learning_rate_is_compatible(written, config):
    path, _ = written
    check_compatible(read_checkpoint(path), config.replace(learning_rate=5e-4))


# ----------------------------------------------------------------- damaged files ----
def flip_unique(path, pattern: bytes) -> None:
    """Flips the first byte of `pattern`, which the file must hold exactly once."""
    data = bytearray(open(path, "rb").read())
    assert data.count(pattern) == 1, pattern
    data[data.index(pattern)] ^= 0xFF
    open(path, "wb").write(data)


def test_a_damaged_counter_attribute_is_refused(written):
    path, _ = written
    flip_unique(path, np.int64(1000).tobytes())  # env_steps, an attribute of /counters
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: its metadata"):
        read_checkpoint(path)


def test_a_damaged_header_is_refused(written):
    path, _ = written
    flip_unique(path, b'"metadata_crc32"')
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: its header"):
        read_checkpoint(path)


def test_bytes_appended_to_a_checkpoint_are_refused(written):
    path, _ = written
    with open(path, "ab") as file:
        file.write(b"\0" * 16)
    with pytest.raises(CorruptCheckpointError, match=r"ckpt\.h5 is corrupted: it holds \d+ bytes"):
        read_checkpoint(path)


def _as_format_1(path, target) -> None:
    """Copies a checkpoint as format version 1 wrote it: the same HDF5 content, no header."""
    with h5py.File(path, "r") as source, h5py.File(target, "w") as copy:
        for name in source:
            source.copy(source[name], copy, name=name)
        copy.attrs.update(source.attrs)
        copy.attrs["format_version"] = 1


def test_a_format_1_checkpoint_without_the_header_still_loads(written, tmp_path):
    path, state = written
    old = tmp_path / "old.h5"
    _as_format_1(path, old)
    read = read_checkpoint(old)
    assert read.counters == state.counters and read.config == state.config
    np.testing.assert_array_equal(read.online_weights[1], state.online_weights[1])


def test_a_format_2_checkpoint_that_lost_its_header_is_refused(written, tmp_path):
    path, _ = written
    headless = tmp_path / "headless.h5"
    _as_format_1(path, headless)
    with h5py.File(headless, "r+") as file:
        file.attrs["format_version"] = 2
    with pytest.raises(CorruptCheckpointError, match="lacks the header of version 2"):
        read_checkpoint(headless)


# ----------------------------------------------------------------- a killed writer ---
WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from r2d2_agent.checkpoints import TrainingCounters, TrainingState, write_checkpoint

    path, updates = sys.argv[1], int(sys.argv[2])
    big = [np.full((4_000_000,), i, np.float32) for i in range(8)]  # 128 MB per write
    state = TrainingState(big, big, big, (), (), TrainingCounters(learner_updates=updates),
                          {}, "0.1.0")
    print("writing", flush=True)
    while True:
        write_checkpoint(path, state)
    """
)


def test_a_writer_killed_during_a_save_leaves_the_previous_checkpoint_loadable(config, tmp_path):
    path = tmp_path / "ckpt.h5"
    write_checkpoint(path, make_state(config, updates=11))
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "99"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert child.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the temporary file is being filled
            temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            if temps and temps[0].stat().st_size > 1_000_000:
                break
            time.sleep(0.005)
        else:
            pytest.fail("the writer never started its temporary file")
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert read_checkpoint(path).counters.learner_updates == 11
    assert [n for n, _ in checkpoint_files(tmp_path)] == []  # a .tmp is never a checkpoint


# ----------------------------------------------------------------- the learner -------
def _batch(config, seed):
    """A random but well-formed batch of the config's sequence layout, as sampled: the
    fields but `frame_ids`, and each row's frames."""
    rng = np.random.default_rng(seed)
    layout = SequenceLayout.from_config(config)
    spec = layout.field_spec()
    b = {n: np.zeros((config.batch_size, *shape), dtype) for n, (shape, dtype) in spec.items()}
    del b["frame_ids"]
    frames = (config.batch_size, layout.frames_per_sequence, *layout.frame_shape)
    b["frames"] = rng.normal(size=frames).astype(np.float32)
    b["obs_mask"][:] = 1.0
    b["burnin_mask"][:] = 1.0
    b["state"][:] = rng.normal(scale=0.3, size=b["state"].shape)
    b["actions"][:] = rng.integers(config.nb_actions, size=b["actions"].shape)
    b["returns"][:] = rng.normal(size=b["returns"].shape)
    b["bootstrap_discount"][:] = config.gamma**config.multisteps
    b["bootstrap_index"][:] = np.arange(config.input_length) + config.multisteps
    b["mask"][:] = 1.0
    return b


@pytest.fixture(scope="module")
def resumed(config, tmp_path_factory):
    """Learner A trains 3 updates and is checkpointed; learner B (other seed) restores the
    file, learner C only copies A's weights; then all three make the same 3 updates."""
    weights = np.linspace(0.5, 1.0, config.batch_size)
    a = R2D2Builder(config).make_learner()
    for seed in range(3):
        a.learn(_batch(config, seed), weights)
    path = write_checkpoint(tmp_path_factory.mktemp("learner") / "a.h5", a.save())
    b = R2D2Builder(config.replace(seed=9)).make_learner()
    b.restore(read_checkpoint(path))
    c = R2D2Builder(config.replace(seed=9)).make_learner()
    c.set_weights(a.get_weights())
    for seed in range(3, 6):
        for learner in (a, b, c):
            learner.learn(_batch(config, seed), weights)
    return a, b, c


def _same(x, y):
    return all(np.array_equal(p, q) for p, q in zip(x, y, strict=True))


def test_a_resumed_learner_makes_the_same_updates_as_the_original(resumed):
    a, b, _ = resumed
    assert _same(a.online.get_weights(), b.online.get_weights())


def test_a_resumed_learner_has_the_same_optimizer_state(resumed):
    a, b, _ = resumed
    assert _same(
        [v.numpy() for v in a.optimizer.variables], [v.numpy() for v in b.optimizer.variables]
    )


def test_a_resumed_learner_continues_the_update_count(resumed):
    a, b, _ = resumed
    assert a.updates == b.updates == 6


def test_weights_alone_without_the_optimizer_state_do_not_resume_exactly(resumed):
    a, _, c = resumed
    assert not _same(a.online.get_weights(), c.online.get_weights())


def test_restoring_a_checkpoint_of_another_network_is_refused_naming_the_fields(resumed, config):
    a, _, _ = resumed
    other = R2D2Builder(config.replace(dense_units=16)).make_learner()
    with pytest.raises(IncompatibleCheckpointError, match="dense_units: 8 in the checkpoint"):
        other.restore(a.save())
