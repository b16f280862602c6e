"""Resident memory of the replay and of the learner at the Atari example's size.

Prints the anonymous RSS (MB) after each stage: creating the replay (84x84x4 uint8,
42,543 sequences: the largest that fits in half of a 24 GiB machine), adding 64
sequences, sampling, building the learner, two learner updates (batch 32).

Usage: python benchmarks/mem_probe_atari.py
"""

from __future__ import annotations

import json

import numpy as np

from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.replay import SequenceRecord
from r2d2_agent.roles import R2D2Builder


def rss_mb() -> float:
    """Anonymous resident memory of this process, in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon"):
                return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no RssAnon in /proc/self/status")


def main() -> None:
    config = R2D2Config(
        input_shape=(84, 84),
        nb_actions=6,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        batch_size=32,
        memory_capacity=42_543,
    )
    builder = R2D2Builder(config)
    report = {"start": rss_mb()}
    replay = builder.make_replay()
    report["replay_created"] = rss_mb()
    report["replay_capacity_gib"] = round(replay.nbytes / 2**30, 2)
    layout = builder.layout
    rng = np.random.default_rng(0)
    first = 0
    for _ in range(64):
        fields = {k: np.zeros(s, d) for k, (s, d) in layout.field_spec().items()}
        fields["frame_ids"][:] = first + np.arange(layout.frames_per_sequence)
        fields["obs_mask"][:] = 1.0
        fields["mask"][:] = 1.0
        fields["bootstrap_index"][:] = np.arange(config.input_length) + config.multisteps
        frames = rng.integers(0, 255, (layout.frames_per_sequence, 84, 84), dtype=np.uint8)
        replay.add(SequenceRecord(fields, 1.0, frames, first))
        first += layout.frames_per_sequence
    report["after_64_sequences"] = rss_mb()
    report["frames_held_mb"] = round(replay.frames_stored * layout.frame_nbytes / 2**20, 1)
    replay.sample(config.batch_size)
    report["after_sampling"] = rss_mb()
    learner = builder.make_learner(replay=replay)
    report["learner_built"] = rss_mb()
    learner.step()
    report["after_1_update"] = rss_mb()
    learner.step()
    report["after_2_updates"] = rss_mb()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
