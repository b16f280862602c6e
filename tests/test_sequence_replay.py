"""`SequenceReplay` stores every frame once: sampled sequences must equal the windows of
stacked observations the actor saw, built the old way (one stack per step) as a
brute-force reference, through episode starts inside the burn-in, ends inside the n-step
tail, truncation, episodes shorter than a sequence, wrap-around of the frame store, and
streams interleaving episode by episode and step by step; a sequence whose frames were
overwritten is never sampled."""

from __future__ import annotations

import functools
import itertools
import re
import tracemalloc
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent, R2D2Manager
from r2d2_agent.compat import tf
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.replay import (
    SequenceLayout,
    SequenceReplay,
    default_frame_capacity,
    estimate_replay_bytes,
    largest_memory_capacity,
    stack_frames,
)
from r2d2_agent.replay.frame_store import BLOCK_OVERHEAD, CompressedFrameStore
from r2d2_agent.roles import R2D2Builder
from r2d2_agent.roles.learner import stack_frames_in_graph

FRAME = (3, 3)


class FixedPolicy:
    """Q-values from the newest frame's counter pixel; the state stays zero."""

    def __init__(self, nb_actions: int, units: int) -> None:
        self.nb_actions = nb_actions
        self.units = units

    def step(self, obs, state, prev_action=None, prev_reward=None):
        q = np.linspace(-1, 1, self.nb_actions)[None] * float(obs[0, -1, 0, 0] % 7)
        return q, np.zeros((1, 2, self.units), np.float32)

    def set_weights(self, weights):
        pass


def image_config(**changes) -> R2D2Config:
    base = dict(
        input_shape=FRAME,
        nb_actions=3,
        input_type=InputType.GRAY_2ch,
        input_sequence=3,
        lstm_units=2,
        dense_units=4,
        burnin=3,
        input_length=4,
        multisteps=2,
        sequence_period=2,
        batch_size=4,
        memory_capacity=64,
        seed=0,
    )
    return R2D2Config(**(base | changes))


def counter_frame(k: int) -> np.ndarray:
    """Frame number k of a stream, as a uint8 image that tells it apart (k < 65,536)."""
    frame = np.zeros(FRAME, np.uint8)
    frame[0, 0] = 1 + k % 250
    frame[1, 1] = k // 250
    return frame


class Stream:
    """One actor on a frame-counter env, keeping, per stored key, the window the old layout
    would have stored: one stack per step, built from the whole episode. Its frames count
    from `first_frame` (streams counting from different ones have different frames)."""

    def __init__(
        self, config: R2D2Config, replay: SequenceReplay, stream: int, first_frame: int = 0
    ) -> None:
        self.config = config
        builder = R2D2Builder(config)
        policy = FixedPolicy(config.nb_actions, config.lstm_units)
        self.actor = builder.make_actor(policy, builder.make_adder(self._add), 0.0, 0)
        self.replay = replay
        self.stream = stream
        self.frame_count = first_frame
        self.episode_frames: list[np.ndarray] = []
        self.windows_emitted = 0  # in the current episode
        self.reference: dict[int, np.ndarray] = {}  # key -> stacked window
        self.stored = 0

    def _add(self, record) -> None:
        start = self.windows_emitted * self.config.period  # windows come in order
        self.windows_emitted += 1
        key = self.replay.add(record, self.stream)
        self.stored += 1
        if key is not None:
            self.reference[key] = self._old_layout_window(start)

    def _old_layout_window(self, start: int) -> np.ndarray:
        config, frames = self.config, self.episode_frames
        stack, last = config.input_sequence, len(frames) - 1
        window = np.zeros((config.sequence_length, stack, *FRAME), np.uint8)
        for p in range(config.sequence_length):
            j = start - config.burnin + p  # the episode step of observation p
            if 0 <= j <= last:
                for k in range(stack):
                    if j - stack + 1 + k >= 0:
                        window[p, k] = frames[j - stack + 1 + k]
        return window

    def play(self, episode_lengths: list[int], truncate: bool) -> None:
        for _ in self.steps(episode_lengths, truncate):
            pass

    def steps(self, episode_lengths: list[int], truncate: bool) -> Iterator[None]:
        """Plays the episodes, pausing after each reset and each env step (to interleave
        streams step by step, as the envs of a vector actor or many actors do)."""
        for length in episode_lengths:
            self.windows_emitted = 0
            self.episode_frames = [counter_frame(self.frame_count)]
            self.frame_count += 1
            self.actor.observe_first(self.episode_frames[0])
            yield
            for t in range(length):
                action = self.actor.select_action()
                frame = counter_frame(self.frame_count)
                self.frame_count += 1
                self.episode_frames.append(frame)
                ended = t == length - 1
                self.actor.observe(action, 1.0, frame, ended and not truncate, ended and truncate)
                yield


def references(streams: list[Stream]) -> dict[int, np.ndarray]:
    """The stored windows of all streams, by key."""
    return {key: window for stream in streams for key, window in stream.reference.items()}


def sample_all(replay: SequenceReplay) -> list[tuple[int, np.ndarray]]:
    """(key, rebuilt window) of many samples."""
    keys, batch, _ = replay.sample(512)
    windows = stack_frames(batch["frames"], batch["obs_mask"], replay.layout.input_sequence)
    return [(int(keys[i]), windows[i]) for i in range(512)]


EPISODES = [1, 2, 4, 7, 9, 13, 6, 3, 20, 5]  # shorter and longer than a sequence (T = 9)


COMPRESSION = pytest.mark.parametrize("compression", [None, "zstd"], ids=["raw", "zstd"])


@COMPRESSION
@pytest.mark.parametrize("truncate", [False, True], ids=["terminated", "truncated"])
def test_sampled_windows_equal_the_actors_stacks(truncate, compression):
    config = image_config(frame_compression=compression)
    replay = R2D2Builder(config).make_replay()
    stream = Stream(config, replay, 0)
    stream.play(EPISODES, truncate)
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, stream.reference[key], err_msg=f"key {key}")


@COMPRESSION
def test_sampled_windows_stay_exact_when_the_frame_store_wraps_around(compression):
    config = image_config()
    layout = R2D2Builder(config).layout
    replay = SequenceReplay(
        layout,
        16,
        0.9,
        seed=0,
        frame_capacity=3 * layout.frames_per_sequence,
        compression=compression,
    )
    stream = Stream(config, replay, 0)
    stream.play(EPISODES * 3, truncate=False)
    assert stream.frame_count > 3 * replay.frame_capacity  # wrapped several times
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, stream.reference[key])


@COMPRESSION
def test_two_interleaving_actors_get_their_own_frames(compression):
    config = image_config(frame_compression=compression)
    replay = R2D2Builder(config).make_replay()
    streams = [Stream(config, replay, s) for s in (0, 1)]
    for lengths in zip(EPISODES, reversed(EPISODES), strict=True):
        for stream, length in zip(streams, lengths, strict=True):
            stream.play([length], truncate=False)
    reference = references(streams)
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, reference[key])


@COMPRESSION
@pytest.mark.parametrize("nb_streams", [2, 5])
def test_streams_interleaving_step_by_step_get_their_own_frames(compression, nb_streams):
    # As the envs of a vector actor (or many actors) send them: one record of each stream
    # in turn, each stream at another point of its own episodes.
    config = image_config(frame_compression=compression, memory_capacity=256)
    replay = R2D2Builder(config).make_replay()
    streams = [Stream(config, replay, s, first_frame=1_000 * s) for s in range(nb_streams)]
    playing = [
        s.steps(EPISODES[i:] + EPISODES[:i], truncate=i % 2 == 1) for i, s in enumerate(streams)
    ]
    for _ in itertools.zip_longest(*playing):  # a step of each stream in turn, to the end
        pass
    if compression is None:  # (3x3 frames cannot shrink to zstd's byte budget: some go)
        assert len(replay) == sum(s.stored for s in streams)  # nothing evicted
    reference = references(streams)
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, reference[key])


@COMPRESSION
def test_a_sequence_with_an_overwritten_frame_is_never_sampled(compression):
    config = image_config()
    layout = R2D2Builder(config).layout
    # room for many sequences but few frames: frames go before their sequences do
    replay = SequenceReplay(
        layout,
        64,
        0.9,
        seed=0,
        frame_capacity=2 * layout.frames_per_sequence,
        compression=compression,
    )
    streams = [Stream(config, replay, s) for s in (0, 1)]
    for length in EPISODES * 2:
        for stream in streams:
            stream.play([length], truncate=False)
    stored = sum(s.stored for s in streams)
    assert len(replay) < min(stored, replay.capacity)  # frames, not the ring, evicted some
    reference = references(streams)
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, reference[key])


def test_priority_write_backs_of_evicted_sequences_are_skipped():
    config = image_config()
    layout = R2D2Builder(config).layout
    replay = SequenceReplay(layout, 64, 0.9, seed=0, frame_capacity=2 * layout.frames_per_sequence)
    stream = Stream(config, replay, 0)
    stream.play([20], truncate=False)
    keys, _, _ = replay.sample(64)
    stream.play([20, 20], truncate=False)  # overwrites every frame of the first episode
    assert replay.update_priorities(keys, np.ones(64)) == 0


def test_default_frame_capacity_keeps_every_stored_sequences_frames():
    config = image_config(memory_capacity=16)
    replay = R2D2Builder(config).make_replay()
    stream = Stream(config, replay, 0)
    stream.play(EPISODES * 4, truncate=False)
    assert replay.dropped == 0
    assert len(replay) == 16  # the sequence ring, not the frames, decided what is stored


def test_stacking_in_the_learner_graph_equals_the_numpy_reference():
    rng = np.random.default_rng(0)
    steps, stack = 6, 3
    frames = rng.integers(0, 255, (2, steps + stack - 1, *FRAME)).astype(np.uint8)
    obs_mask = np.ones((2, steps), np.float32)
    obs_mask[0, 4:] = 0.0
    got = stack_frames_in_graph(tf.constant(frames), tf.constant(obs_mask), steps, stack)
    np.testing.assert_array_equal(got.numpy(), stack_frames(frames, obs_mask, stack))


# ---------------------------------------------------------------- memory estimate ----
@pytest.mark.parametrize(
    "config",
    [
        image_config(),
        image_config(input_type=InputType.COLOR, input_shape=(3, 3, 3), memory_capacity=50),
        R2D2Config(input_shape=(4,), nb_actions=2, memory_capacity=100, batch_size=8),
    ],
    ids=["gray_uint8", "color_uint8", "values_float32"],
)
def test_the_estimate_is_what_the_replay_allocates(config):
    assert estimate_replay_bytes(config) == R2D2Builder(config).make_replay().nbytes


PAPER = R2D2Config(
    input_shape=(84, 84), nb_actions=18, input_type=InputType.GRAY_2ch, input_sequence=4
)


def test_the_papers_replay_keeps_at_most_1_1_frames_per_env_step():
    layout = SequenceLayout.from_config(PAPER, np.uint8)
    frames = default_frame_capacity(layout, PAPER.memory_capacity)
    env_steps = PAPER.memory_capacity * PAPER.period  # 100k sequences x 40 new steps
    assert frames / env_steps <= 1.1


def test_the_papers_replay_fits_in_31_gb_as_uint8():
    assert estimate_replay_bytes(PAPER) <= 31e9


def test_the_largest_capacity_for_a_budget_fits_and_one_more_does_not():
    budget = 2**30
    capacity = largest_memory_capacity(PAPER, budget)
    assert estimate_replay_bytes(PAPER.replace(memory_capacity=capacity)) <= budget
    assert estimate_replay_bytes(PAPER.replace(memory_capacity=capacity + 1)) > budget


TOO_BIG = PAPER.replace(memory_capacity=1_000_000)  # about 297 GB


def test_the_agent_refuses_a_replay_larger_than_the_machine_naming_memory_capacity():
    with pytest.raises(ValueError, match=r"memory_capacity=1000000 .* GiB .* available"):
        R2D2Agent(TOO_BIG)


class _AtariShapedEnv(gym.Env):
    """Blank 84x84 uint8 frames and 18 actions: what the manager's pre-flight resets."""

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(18)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((84, 84), np.uint8), {}

    def step(self, action):
        return np.zeros((84, 84), np.uint8), 0.0, False, False, {}


def _atari_shaped_env() -> gym.Env:
    return _AtariShapedEnv()


def test_the_manager_refuses_a_replay_larger_than_the_machine_before_any_child():
    import multiprocessing

    with pytest.raises(ValueError, match=r"memory_capacity=1000000 .* GiB .* available"):
        R2D2Manager(functools.partial(_atari_shaped_env), TOO_BIG, actor_num=1)
    assert multiprocessing.active_children() == []


def test_frame_ids_that_wrap_around_2_31_still_name_the_right_frames():
    config = image_config()
    replay = R2D2Builder(config).make_replay()
    stream = Stream(config, replay, 0)
    stream.actor.adder._next_id = 2**31 - 25  # the adder's ids wrap within the first episodes
    stream.play(EPISODES, truncate=False)
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, stream.reference[key])


def test_compressed_frames_over_their_byte_budget_leave_early_with_their_sequences():
    """Sized for 1000x compression, the counter frames (about 9 bytes each compressed,
    per block) do not fit: the oldest blocks go before the frame ring is full, their
    sequences are invalidated, and every sampled window is still exact."""
    config = image_config()
    layout = R2D2Builder(config).layout
    replay = SequenceReplay(layout, 64, 0.9, seed=0, compression="zstd", compression_ratio=1000)
    stream = Stream(config, replay, 0)
    stream.play(EPISODES * 2, truncate=False)
    assert replay.frames_stored < min(stream.frame_count, replay.frame_capacity)
    assert replay.nbytes <= estimate_replay_bytes(
        config.replace(frame_compression="zstd", frame_compression_ratio=1000)
    )
    for key, window in sample_all(replay):
        np.testing.assert_array_equal(window, stream.reference[key])


def test_compressed_replay_never_holds_more_than_its_estimate():
    config = image_config(frame_compression="zstd", memory_capacity=16)
    replay = R2D2Builder(config).make_replay()
    stream = Stream(config, replay, 0)
    stream.play(EPISODES * 4, truncate=False)
    assert 0 < replay.nbytes <= estimate_replay_bytes(config)


def _screens(count: int) -> np.ndarray:
    """84x84 frames that change little from step to step, as game screens do."""
    frames = np.zeros((count, 84, 84), np.uint8)
    frames[:, 40:44, :] = 120
    frames[np.arange(count), 10, np.arange(count)] = 255  # a moving dot
    return frames


def test_a_compressed_replay_filled_one_and_a_half_times_allocates_no_more_than_its_estimate():
    """zstandard's `compress` returns bytes that keep the allocation of its worst case
    (about the raw block) and only report the shorter length: stored as they are, the
    blocks would hold about the raw frames, several times `estimate_replay_bytes`, which
    counts the compressed bytes. tracemalloc counts every allocation still alive at its
    allocated size (numpy's arrays and the stored blocks alike)."""
    config = image_config(input_shape=(84, 84), frame_compression="zstd", memory_capacity=16)
    builder = R2D2Builder(config)
    screens = _screens(84)
    tracemalloc.start()
    try:
        replay = builder.make_replay()
        adder = builder.make_adder(replay.add)
        state = np.zeros((2, config.lstm_units), np.float32)
        step = 0
        while replay.frames_stored < replay.frame_capacity or step < 1.5 * replay.frame_capacity:
            adder.add_first(screens[step % 84])
            for t in range(20):  # episodes of 20 steps
                step += 1
                frame = screens[step % 84]
                adder.add(0, 1.0, frame, t == 19, False, state, np.zeros(config.nb_actions))
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert step * 2 > 3 * replay.frame_capacity and len(replay) == replay.capacity
    assert allocated <= estimate_replay_bytes(config)


def test_compressed_blocks_of_screens_take_a_tenth_of_their_raw_size():
    store = CompressedFrameStore((84, 84), np.uint8, capacity=100, byte_budget=10**6)
    store.store(_screens(60))
    assert store.nbytes * 10 < 60 * 84 * 84


def test_compressed_store_gives_back_the_frames_it_was_given():
    store = CompressedFrameStore((84, 84), np.uint8, capacity=100, byte_budget=10**6)
    screens = _screens(60)
    first = store.store(screens[:25])
    second = store.store(screens[25:])
    numbers = np.array([[second[3], -1, first[0]], [first[24], second[0], second[-1]]])
    got = store.gather(numbers)
    want = np.stack(
        [
            [screens[28], np.zeros((84, 84), np.uint8), screens[0]],
            [screens[24], screens[25], screens[59]],
        ]
    )
    np.testing.assert_array_equal(got, want)


def _payload(frames: np.ndarray) -> int:
    """Bytes zstandard (level 1, as the store) makes of a block, with the store's overhead."""
    zstandard = pytest.importorskip("zstandard")
    return len(zstandard.ZstdCompressor(level=1).compress(frames.tobytes())) + BLOCK_OVERHEAD


def _store_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "r2d2_agent.replay.frame_store"]


def test_frames_over_the_byte_budget_are_reported_once_with_their_ratio(caplog):
    block = np.zeros((10, 84, 84), np.uint8)  # 70,560 raw bytes that shrink to a few dozen
    size = _payload(block)
    budget = 2 * size + 1  # two blocks fit, the third is over
    store = CompressedFrameStore((84, 84), np.uint8, capacity=100, byte_budget=budget)
    with caplog.at_level("WARNING"):
        for _ in range(5):  # 50 frames: the ring of 100 needs no room
            store.store(block)
    assert store.blocks_over_budget == 3
    held = 10 * 84 * 84 / size
    [message] = _store_warnings(caplog)
    assert f"compress {held:.2f}:1" in message
    assert f"the {100 * 84 * 84 / budget:.1f}:1 (frame_compression_ratio)" in message
    assert f"frame_compression_ratio={np.floor(held * 10) / 10}" in message


def test_frames_that_do_not_shrink_are_advised_to_be_stored_raw(caplog):
    block = np.random.default_rng(0).integers(0, 256, (10, 84, 84), dtype=np.uint8)
    store = CompressedFrameStore((84, 84), np.uint8, capacity=100, byte_budget=_payload(block))
    with caplog.at_level("WARNING"):
        for _ in range(3):
            store.store(block)
    [message] = _store_warnings(caplog)
    assert store.blocks_over_budget == 2
    assert "do not shrink: store them raw (frame_compression=None)" in message


def test_blocks_the_frame_ring_overwrites_are_not_reported(caplog):
    block = np.zeros((10, 84, 84), np.uint8)
    store = CompressedFrameStore((84, 84), np.uint8, capacity=20, byte_budget=10**6)
    with caplog.at_level("WARNING"):
        for _ in range(6):  # the ring of 20 frames drops blocks 0-3
            store.store(block)
    assert store.oldest_kept == 40
    assert store.blocks_over_budget == 0
    assert _store_warnings(caplog) == []


def test_dropped_sequences_warn_at_the_first_the_tenth_and_the_hundredth(caplog):
    config = image_config()
    layout = R2D2Builder(config).layout
    # sized for 1000x compression, the 3x3 frames keep about one record's block
    replay = SequenceReplay(layout, 64, 0.9, seed=0, compression="zstd", compression_ratio=1000)
    stream = Stream(config, replay, 0)
    with caplog.at_level("WARNING"):
        stream.play(EPISODES * 4, truncate=False)
    warned = [
        int(re.search(r"dropped a sequence .*\((\d+) so far\)", r.getMessage())[1])
        for r in caplog.records
        if r.name == "r2d2_agent.replay.sequence_replay"
    ]
    assert replay.dropped >= 10
    assert warned == [n for n in (1, 10, 100, 1_000, 10_000) if n <= replay.dropped]


def test_an_unknown_compression_is_refused_naming_it():
    with pytest.raises(ValueError, match="frame_compression"):
        image_config(frame_compression="lz5")


@pytest.mark.parametrize("prev_action_reward", [False, True], ids=["plain", "prev_action_reward"])
def test_batch_spec_is_what_sample_returns(prev_action_reward):
    config = image_config(enable_prev_action_reward=prev_action_reward)
    replay = R2D2Builder(config).make_replay()
    Stream(config, replay, 0).play(EPISODES, truncate=False)
    _, batch, _ = replay.sample(5)
    got = {name: (array.shape, array.dtype) for name, array in batch.items()}
    want = {
        name: ((5, *shape), np.dtype(dtype)) for name, (shape, dtype) in replay.batch_spec().items()
    }
    assert got == want
