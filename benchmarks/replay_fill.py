"""Fills a learner's replay with random, fully valid sequences; and the Atari-sized
configuration the learner benchmarks measure (shared by the benchmarks).

The sequences overlap as an actor's do: sequence `i` stacks frames `i * period ...` of
one stream, so each record after the first brings only `period` new frames, and the
replay's default frame capacity holds them all (a record with all its own frames would
take `T + S - 1` frames each and push the oldest sequences out of a small replay).
"""

from __future__ import annotations

import numpy as np

from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.replay import SequenceLayout, SequenceRecord

__all__ = ["atari_sized_config", "fill_replay"]


def atari_sized_config() -> R2D2Config:
    """The paper's network and batch at Atari size (84x84 gray x 4 frames, DQN torso,
    LSTM 512, 64 sequences of 40 burn-in + 80 trained + 5 look-ahead steps), with a tiny
    replay: what `bench_agent.py` and `bench_learner.py` time an update of."""
    return R2D2Config(
        input_shape=(84, 84),
        nb_actions=18,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        batch_size=64,
        burnin=40,
        input_length=80,
        multisteps=5,
        memory_capacity=200,
        seed=0,
    )


def fill_replay(
    learner,
    config: R2D2Config,
    count: int,
    dtype: type,
    seed: int = 0,
    recorded: np.ndarray | None = None,
) -> None:
    """Adds `count` random, fully valid sequences (no padding, no episode end) to `learner`.

    Args:
        learner: An `R2D2Learner` (or anything with its `add(record, stream)`).
        config: The learner's config.
        count: Sequences to add.
        dtype: Frame dtype: uint8 frames get random pixels, float frames uniform [0, 1).
        seed: Seed of the random data.
        recorded: Frames to use instead of random ones (e.g. `record_ale_frames.py`'s),
            frame `k` of the stream being `recorded[k % len(recorded)]`.
    """
    rng = np.random.default_rng(seed)
    layout = SequenceLayout.from_config(config, dtype)
    spec = layout.field_spec()
    frames_per_sequence = layout.frames_per_sequence
    period = config.period
    length = config.input_length

    def random_frames(n: int, first: int) -> np.ndarray:
        if recorded is not None:
            return np.asarray(recorded[np.arange(first, first + n) % len(recorded)], dtype)
        shape = (n, *layout.frame_shape)
        if np.dtype(dtype) == np.uint8:
            return rng.integers(0, 256, shape, dtype=np.uint8)
        return rng.random(shape).astype(dtype)

    for i in range(count):
        fields = {name: np.zeros(shape, dt) for name, (shape, dt) in spec.items()}
        fields["frame_ids"][:] = i * period + np.arange(frames_per_sequence)
        fields["obs_mask"][:] = 1.0
        fields["burnin_mask"][:] = 1.0
        fields["state"][:] = rng.normal(scale=0.1, size=fields["state"].shape)
        fields["actions"][:] = rng.integers(config.nb_actions, size=length)
        fields["returns"][:] = rng.normal(size=length)
        fields["bootstrap_discount"][:] = config.gamma**config.multisteps
        fields["bootstrap_index"][:] = np.arange(length) + config.multisteps
        fields["mask"][:] = 1.0
        if "prev_actions" in fields:
            fields["prev_actions"][:] = rng.integers(config.nb_actions, size=layout.sequence_length)
            fields["prev_rewards"][:] = rng.normal(size=layout.sequence_length)
        if i == 0:
            first, new = 0, frames_per_sequence
        else:
            first, new = (i - 1) * period + frames_per_sequence, period
        priority = float(rng.uniform(0.5, 1.5))
        record = SequenceRecord(fields, priority, random_frames(new, first), first)
        learner.add(record)
