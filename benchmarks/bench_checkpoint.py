"""Benchmark: writing and reading a resumable checkpoint.

For the CartPole preset and an Atari-sized R2D2 (84x84 grayscale, 4 stacked frames,
`DQNImageModel`, LSTM 512, dense 512), it measures (medians over ``--repeats``):

* ``save_ms``: `R2D2Learner.save()` (weights, target, Adam state copied out of TF);
* ``write_ms``: `write_checkpoint` (HDF5 with CRC-32 per dataset, fsync, rename);
* ``read_ms``: `read_checkpoint` (checksums checked), what the manager's parent does;
* ``restore_ms``: `R2D2Learner.restore` into a fresh learner;
* ``file_mb``: the file's size (online + target + Adam's two moments: 4 x the weights).

The replay is not part of a checkpoint, so the Atari config gets a tiny one.

One JSON object is printed.

Usage::

    python benchmarks/bench_checkpoint.py [--repeats 5] [--skip-atari]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import r2d2_agent.compat  # noqa: F401  (TensorFlow in legacy-Keras mode first)
from r2d2_agent.checkpoints import read_checkpoint, write_checkpoint
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.presets import cartpole_config
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-atari", action="store_true")
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
    print(
        json.dumps(
            {"benchmark": "checkpoint", "machine": platform.machine(), "results": results},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
