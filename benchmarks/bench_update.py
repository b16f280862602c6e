"""One learner update as the single-process agent makes it: CPU milliseconds per cycle.

A cycle is what the agent does per update: one new sequence into the replay (carrying the
moments of 4 rewards, as a record of 4 new env steps does) and `learner.step()` (sample,
the compiled update, priorities). The configurations: the CartPole and masked-CartPole
presets and `memory_config` (rewards normalised, so the reward statistics merge every
update; also with `each_step_scored`), with `--set` overrides, all with 1 TensorFlow
thread. CPU time of the process (TensorFlow's threads included), the median of
`--repeats` blocks of `--updates` cycles each.

`conversion_us_per_update` is the part of a cycle that turns one sampled batch (its
fields, the importance weights and the reward moments: the update's flat inputs) into
tensors, in microseconds: `tf.convert_to_tensor` as TensorFlow's public call does it,
against `compat.flat_caller`'s own tensor maker, alternating, median of `--repeats`.

Run it beside another checkout (`PYTHONPATH=<other checkout>`) to compare two versions of
the learner; alternate the two a few times, as the figures move by 10-20% between runs
on a shared machine. Prints one JSON object. Usage::

    python benchmarks/bench_update.py
    python benchmarks/bench_update.py --repeats 9 --updates 50
    python benchmarks/bench_update.py --set target_update_interval=1   # every configuration
    python benchmarks/bench_update.py --memory-span 26   # memory_config's 64-step window
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import numpy as np

from r2d2_agent import compat
from r2d2_agent.compat import tf
from r2d2_agent.presets import cartpole_config, masked_cartpole_config, memory_config
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from header import report_header  # noqa: E402
from overrides import parse_overrides  # noqa: E402
from replay_fill import fill_replay  # noqa: E402

WARM = 200
"""Sequences in the replay before the first update."""


class _Records:
    """Collects what `fill_replay` adds (it adds to anything with `add`)."""

    def __init__(self) -> None:
        self.records: list = []

    def add(self, record) -> None:
        self.records.append(record)


def cycle_ms(config, updates: int, repeats: int) -> float:
    """Median CPU milliseconds of one add-and-update cycle (see the module docstring)."""
    learner = R2D2Builder(config).make_learner()
    made = _Records()
    fill_replay(made, config, WARM + updates * (repeats + 1), np.float32)
    rewards = {"reward_count": 4, "reward_sum_square": 4.0}
    records = iter(dataclasses.replace(r, **rewards) for r in made.records)
    for _ in range(WARM):
        learner.add(next(records))
    for _ in range(updates):  # the first trace, and a warm start
        learner.add(next(records))
        learner.step()
    blocks = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(updates):
            learner.add(next(records))
            learner.step()
        blocks.append((time.process_time() - start) / updates * 1e3)
    return round(statistics.median(blocks), 3)


def conversion_us(config, repeats: int, rounds: int = 200) -> dict[str, float]:
    """Microseconds to make tensors of one update's flat inputs: through
    `tf.convert_to_tensor` and through `flat_caller`'s maker (see the module docstring)."""
    learner = R2D2Builder(config).make_learner()
    made = _Records()
    fill_replay(made, config, WARM, np.float32)
    for record in made.records:
        learner.add(record)
    _, batch, _ = learner.replay.sample(config.batch_size)
    signature = learner._update_signature()
    arrays = [batch[name] for name in learner._fields]
    arrays += [np.ones(config.batch_size, np.float32), np.array([4.0, 4.0])]
    dtypes = [spec.dtype for spec in signature]
    maker = compat._eager_tensor_maker()
    makers = {
        "convert_to_tensor": lambda a, d: tf.convert_to_tensor(a, dtype=d),
        "flat_caller": maker,
    }
    times: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(repeats):
        for name, make in makers.items():
            start = time.process_time()
            for _ in range(rounds):
                for array, dtype in zip(arrays, dtypes, strict=True):
                    make(array, dtype)
            times[name].append((time.process_time() - start) / rounds * 1e6)
    return {name: round(statistics.median(values), 1) for name, values in times.items()}


def main(argv: list[str] | None = None) -> dict:
    """Measures the configurations and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=50, help="cycles per repeat")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="override, every config"
    )
    parser.add_argument(
        "--memory-span",
        type=int,
        default=None,
        help="memory_config's memory_span (env steps; default: the preset's own)",
    )
    args = parser.parse_args(argv)
    span = {} if args.memory_span is None else {"memory_span": args.memory_span}
    overrides = parse_overrides(args.set)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    configs = {
        "cartpole": cartpole_config(seed=0, **overrides),
        "masked": masked_cartpole_config(seed=0, **overrides),
        "memory": memory_config(input_shape=(4,), nb_actions=4, seed=0, **span, **overrides),
        "memory_each_step": memory_config(
            input_shape=(4,), nb_actions=4, each_step_scored=True, seed=0, **span, **overrides
        ),
    }
    report = {
        **report_header("bench_update"),
        "overrides": args.set,
        "memory_span": args.memory_span,
        "cpu_ms_per_cycle": {},
        "conversion_us_per_update": {},
    }
    for name, config in configs.items():
        report["cpu_ms_per_cycle"][name] = cycle_ms(config, args.updates, args.repeats)
        report["conversion_us_per_update"][name] = conversion_us(config, args.repeats)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
