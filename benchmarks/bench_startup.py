"""Benchmark: what a learner costs before its first update (the manager's start-up).

Each measurement runs in a fresh Python process (spawned, as a user's script or the
manager's learner process starts) and times, in order:

* ``import_s``: importing TensorFlow (through `r2d2_agent.compat`);
* ``make_learner_s``: `R2D2Builder(config).make_learner()` (online and target Keras
  models, optimizer, replay);
* ``trace_s``: `learner.trace()`, building the update's graph; ``traces`` is how often
  TensorFlow traced it (a first trace that creates the optimizer's variables makes it
  trace twice);
* ``first_update_s`` and ``second_update_s``: `learner.step()` on a replay of random valid
  sequences (the first call also optimises the graph).

Variants (``--variants``): ``now`` is the library as it is. ``before`` rebuilds what the
learner did until 2026-11-25, patched in the child process only: the model's LSTM as
`keras.layers.LSTM` (it registers cuDNN and CPU variants of its loop as it is built), a
fresh optimizer whose slots the first trace creates, and the update traced with AutoGraph.
Variants and repeats run interleaved.

Prints one JSON object. Usage::

    python benchmarks/bench_startup.py                         # CartPole preset and Atari size
    python benchmarks/bench_startup.py --sizes cartpole --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_process import in_fresh_process  # noqa: E402
from header import report_header  # noqa: E402

VARIANTS = ("now", "before")


def _config(size: str):
    if size == "atari":
        from replay_fill import atari_sized_config

        return atari_sized_config()
    from r2d2_agent.presets import cartpole_config

    return cartpole_config(seed=0)


def _as_before(learner, builder) -> None:
    """The learner as it was built before 2026-11-25 (see the module docstring)."""
    from r2d2_agent.compat import tf

    learner._optimizer = builder.make_optimizer()  # past the setter: slots not built yet
    train = tf.function(learner._train_graph, reduce_retracing=True)
    fields = learner._fields

    def update(*arrays):  # the batch as a dict, traced at its first call (the new
        *batch, weights, _ = arrays  # rewards' merge is not part of that update)
        return train(dict(zip(fields, batch, strict=True)), weights)

    learner._train[learner._whole_extent] = train
    learner._updates[learner._whole_extent] = update


def measure(size: str, variant: str) -> dict:
    """One fresh-process measurement (runs in the child)."""
    t0 = time.perf_counter()
    from r2d2_agent.compat import keras

    import_s = time.perf_counter() - t0
    from replay_fill import fill_replay

    from r2d2_agent.roles import R2D2Builder

    if variant == "before":
        keras.layers.RNN = lambda cell, **kwargs: keras.layers.LSTM(cell.units, **kwargs)
    config = _config(size)
    builder = R2D2Builder(config)
    t0 = time.perf_counter()
    learner = builder.make_learner()
    make_s = time.perf_counter() - t0
    if variant == "before":
        _as_before(learner, builder)
    t0 = time.perf_counter()
    learner.trace()
    trace_s = time.perf_counter() - t0
    fill_replay(learner, config, max(config.warmup, config.batch_size), builder.observation_dtype)
    updates = []
    for _ in range(2):
        t0 = time.perf_counter()
        learner.step()
        updates.append(time.perf_counter() - t0)
    return {
        "size": size,
        "variant": variant,
        "import_s": round(import_s, 3),
        "make_learner_s": round(make_s, 3),
        "trace_s": round(trace_s, 3),
        "traces": learner.update_traces,
        "first_update_s": round(updates[0], 3),
        "second_update_s": round(updates[1], 4),
        "lstm_layer": type(learner.online.lstm).__name__,
    }


def main(argv: list[str] | None = None) -> dict:
    """Runs the measurements and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["cartpole", "atari"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    args = parser.parse_args(argv)
    report: dict = {**report_header("bench_startup"), "runs": [], "medians": {}}
    for size in args.sizes:
        for repeat in range(args.repeats):
            order = args.variants if repeat % 2 == 0 else args.variants[::-1]
            for variant in order:
                run = in_fresh_process(measure, size, variant)
                print(json.dumps(run), file=sys.stderr, flush=True)
                report["runs"].append(run)
        for variant in args.variants:
            runs = [r for r in report["runs"] if r["size"] == size and r["variant"] == variant]
            report["medians"][f"{size}/{variant}"] = {
                key: statistics.median(r[key] for r in runs)
                for key in ("import_s", "make_learner_s", "trace_s", "traces", "first_update_s")
            }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
