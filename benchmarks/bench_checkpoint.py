"""Benchmark: writing and reading a resumable checkpoint.

For the CartPole preset and an Atari-sized R2D2 (84x84 grayscale, 4 stacked frames,
`DQNImageModel`, LSTM 512, dense 512), it measures (medians over ``--repeats``):

* ``save_ms``: `R2D2Learner.save()` (weights, target, Adam state copied out of TF);
* ``write_ms``: `write_checkpoint` (HDF5 with CRC-32 per dataset, fsync, rename);
* ``read_ms``: `read_checkpoint` (checksums checked), what the manager's parent does;
* ``restore_ms``: `R2D2Learner.restore` into a fresh learner;
* ``file_mb``: the file's size (online + target + Adam's two moments: 4 x the weights).

The weights-only rows give the Atari config a tiny replay. A last row
(``--replay-sequences``, 0 to skip) measures a checkpoint that also holds the replay
(`CheckpointCallback(save_replay=True)`): the Atari example's CPU-sized learner with
that many sequences, filled through a `SequenceAdder` with random uint8 frames (which do
not compress: the worst case for the file size), episodes of 400 steps.

One JSON object is printed.

Usage::

    python benchmarks/bench_checkpoint.py [--repeats 5] [--skip-atari] [--replay-sequences 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

import r2d2_agent.compat  # noqa: F401  (TensorFlow in legacy-Keras mode first)
from r2d2_agent.checkpoints import read_checkpoint, write_checkpoint
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.presets import cartpole_config
from r2d2_agent.replay import SequenceAdder, SequenceLayout
from r2d2_agent.roles import R2D2Builder


def _ms(fn, repeats):
    times = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def measure(name: str, config: R2D2Config, repeats: int) -> dict:
    learner = R2D2Builder(config).make_learner()
    other = R2D2Builder(config).make_learner()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "ckpt.h5")
        save_ms, state = _ms(learner.save, repeats)
        write_ms, _ = _ms(lambda: write_checkpoint(path, state), repeats)
        read_ms, read = _ms(lambda: read_checkpoint(path), repeats)
        restore_ms, _ = _ms(lambda: other.restore(read), repeats)
        size = os.path.getsize(path)
    params = sum(int(w.size) for w in state.online_weights)
    return {
        "net": name,
        "parameters": params,
        "file_mb": round(size / 1e6, 2),
        "save_ms": round(save_ms, 1),
        "write_ms": round(write_ms, 1),
        "read_ms": round(read_ms, 1),
        "restore_ms": round(restore_ms, 1),
    }


def fill_replay(learner, config: R2D2Config, sequences: int, seed: int = 0) -> None:
    """Random episodes of 400 steps through a `SequenceAdder` until the replay holds
    `sequences` sequences (random uint8 frames: incompressible)."""
    rng = np.random.default_rng(seed)
    layout = SequenceLayout.from_config(config)
    adder = SequenceAdder(learner.add, layout, gamma=config.gamma, priority_eta=0.9, rescaling=True)
    state = np.zeros((2, layout.state_size), np.float32)
    while len(learner.replay) < sequences:
        adder.add_first(rng.integers(0, 256, layout.frame_shape, np.uint8))
        for t in range(400):
            adder.add(
                int(rng.integers(config.nb_actions)),
                float(rng.normal()),
                rng.integers(0, 256, layout.frame_shape, np.uint8),
                terminated=t == 399,
                truncated=False,
                state=state,
                q_values=rng.normal(size=config.nb_actions),
            )


def measure_with_replay(sequences: int, repeats: int) -> dict:
    """A checkpoint holding the replay: the Atari example's CPU-sized learner."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
    from atari import CPU_SIZED

    config = R2D2Config(
        input_shape=(84, 84),
        nb_actions=4,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        **{**CPU_SIZED, "memory_capacity": sequences, "memory_warmup": 16},
    )
    learner = R2D2Builder(config).make_learner()
    other = R2D2Builder(config).make_learner()
    fill_replay(learner, config, sequences)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "ckpt.h5")
        save_ms, state = _ms(lambda: learner.save(replay=True, copy_replay=False), repeats)
        write_ms, _ = _ms(lambda: write_checkpoint(path, state), repeats)
        read_ms, read = _ms(lambda: read_checkpoint(path), repeats)
        restore_ms, _ = _ms(lambda: other.restore(read), repeats)
        size = os.path.getsize(path)
    return {
        "net": "atari_cpu_sized_with_replay",
        "replay_sequences": len(other.replay),
        "replay_frames": int(learner.replay.frames_stored),
        "file_mb": round(size / 1e6, 1),
        "save_ms": round(save_ms, 1),
        "write_ms": round(write_ms, 1),
        "read_ms": round(read_ms, 1),
        "restore_ms": round(restore_ms, 1),
        "write_mb_per_s": round(size / 1e6 / (write_ms / 1000), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-atari", action="store_true")
    parser.add_argument(
        "--replay-sequences", type=int, default=2000, help="replay row's size (0: skip)"
    )
    args = parser.parse_args()
    results = [measure("cartpole_preset", cartpole_config(), args.repeats)]
    if not args.skip_atari:
        atari = R2D2Config(  # paper-sized network; a tiny replay (not in a checkpoint)
            input_shape=(84, 84),
            nb_actions=6,
            input_type=InputType.GRAY_2ch,
            input_sequence=4,
            memory_capacity=64,
            batch_size=32,
        )
        results.append(measure("atari_dqn_lstm512", atari, args.repeats))
    if args.replay_sequences:
        results.append(measure_with_replay(args.replay_sequences, args.repeats))
    print(
        json.dumps(
            {"benchmark": "checkpoint", "machine": platform.machine(), "results": results},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
