"""The learner's update with `unroll_lstm_cell` against Keras's own cell called per step.

Until stop 52 `R2D2Network.unroll` called `keras.layers.LSTMCell` at every step: two
matrix products and three weight reads per step. `unroll_lstm_cell` projects all steps'
inputs in one product and reads each weight once. This benchmark builds two learners of
one configuration in one process, one tracing its update with the Keras cell per step
(the way before) and one with `unroll_lstm_cell` (the way now), and times them in
interleaved blocks (`learner.step()`, CPU milliseconds of the process, 1 TensorFlow
thread), so that the machine's drift hits both alike. Configurations: the CartPole and
masked-CartPole presets and `memory_config` at its 16-step and 64-step windows
(`memory_span` 0 and 26); with `--atari` also the paper's network and batch at Atari
size (`replay_fill.atari_sized_config`, uint8 frames). Prints one JSON object. Usage::

    python benchmarks/bench_lstm_unroll.py
    python benchmarks/bench_lstm_unroll.py --rounds 15 --updates 30
    python benchmarks/bench_lstm_unroll.py --atari --atari-rounds 3 --atari-updates 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from r2d2_agent.compat import tf
from r2d2_agent.config import InputType
from r2d2_agent.networks import keras_net
from r2d2_agent.presets import cartpole_config, masked_cartpole_config, memory_config
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from header import report_header  # noqa: E402
from replay_fill import atari_sized_config, fill_replay  # noqa: E402

WARM = 300
"""Sequences in the replay before the first update."""


def keras_cell_per_step(cell, features, state, mask=None):
    """The unroll before stop 52: the Keras cell's own call at every step."""
    steps = features.shape[1]
    inputs = tf.unstack(features, num=steps, axis=1)
    keeps = None if mask is None else tf.unstack(mask[:, :, None], num=steps, axis=1)
    h, c = (tf.convert_to_tensor(s, tf.float32) for s in state)
    outputs = []
    for t in range(steps):
        _, (h_new, c_new) = cell(inputs[t], [h, c])
        if keeps is None:
            h, c = h_new, c_new
        else:
            h, c = tf.where(keeps[t], h_new, h), tf.where(keeps[t], c_new, c)
        outputs.append(h)
    return tf.stack(outputs, axis=1), (h, c)


def traced_learner(config, unroll=None, warm_updates: int = 10):
    """A learner with a filled replay and its update traced (with `unroll` standing in
    for `unroll_lstm_cell` during the trace, when given)."""
    learner = R2D2Builder(config).make_learner()
    dtype = np.float32 if config.input_type is InputType.VALUES else np.uint8
    fill_replay(learner, config, min(WARM, config.memory_capacity), dtype)
    ours = keras_net.unroll_lstm_cell
    if unroll is not None:
        keras_net.unroll_lstm_cell = unroll
    try:
        learner.step()  # traces the update
    finally:
        keras_net.unroll_lstm_cell = ours
    for _ in range(warm_updates):
        learner.step()
    return learner


def compare(config, rounds: int, updates: int) -> dict:
    """Median CPU milliseconds per update of both ways, and their ratio."""
    warm = min(10, updates)
    learners = {
        "keras_cell_per_step": traced_learner(config, keras_cell_per_step, warm),
        "unroll_lstm_cell": traced_learner(config, warm_updates=warm),
    }
    blocks: dict[str, list[float]] = {name: [] for name in learners}
    for _ in range(rounds):
        for name, learner in learners.items():
            start = time.process_time()
            for _ in range(updates):
                learner.step()
            blocks[name].append((time.process_time() - start) / updates * 1e3)
    medians = {name: round(statistics.median(values), 2) for name, values in blocks.items()}
    ratio = medians["unroll_lstm_cell"] / medians["keras_cell_per_step"]
    return {"cpu_ms_per_update": medians, "now_over_before": round(ratio, 3)}


def main(argv: list[str] | None = None) -> dict:
    """Measures the configurations and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved blocks per way")
    parser.add_argument("--updates", type=int, default=30, help="updates per block")
    parser.add_argument("--atari", action="store_true", help="also the Atari-sized update")
    parser.add_argument("--atari-rounds", type=int, default=3)
    parser.add_argument("--atari-updates", type=int, default=2)
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    configs = {
        "cartpole": cartpole_config(seed=0),
        "masked": masked_cartpole_config(seed=0),
        "memory_16": memory_config(input_shape=(6,), nb_actions=5, seed=0),
        "memory_64": memory_config(input_shape=(6,), nb_actions=5, memory_span=26, seed=0),
    }
    report = report_header("bench_lstm_unroll")
    for name, config in configs.items():
        report[name] = compare(config, args.rounds, args.updates)
    if args.atari:
        report["atari"] = compare(atari_sized_config(), args.atari_rounds, args.atari_updates)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
