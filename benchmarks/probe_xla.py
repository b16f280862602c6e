"""XLA (``jit_compile=True``) on the learner's update graph: compile time against size.

For one sequence size (``--burnin``, ``--length``, ``--multisteps``) of the CartPole
preset, or the Atari size with ``--atari``, it builds our learner and the bare Keras
update of `bench_learner.py`, and for each of them:

* lowers the update to HLO (`experimental_get_compiler_ir`, no XLA compilation) and
  counts its instructions and `while` loops;
* times the first jit-compiled call (tracing + XLA compilation + one run) and, if that
  finishes, the steady-state ms per update with and without XLA (interleaved).

Run it under ``timeout`` (a large graph can compile for many minutes). Prints one JSON
object. Usage::

    timeout 600 python benchmarks/probe_xla.py --burnin 8 --length 16
    timeout 600 python benchmarks/probe_xla.py --atari --which bare
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

import numpy as np

from r2d2_agent.compat import tf
from r2d2_agent.math import importance_weights
from r2d2_agent.presets import cartpole_config
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_learner import BareUpdate, atari_config, bare_batch  # noqa: E402
from replay_fill import fill_replay  # noqa: E402


def hlo_stats(fn, *args) -> dict:
    """Instruction and while-loop counts of `fn`'s unoptimized HLO, and the lowering time."""
    start = time.perf_counter()
    text = fn.experimental_get_compiler_ir(*args)(stage="hlo")
    seconds = time.perf_counter() - start
    lines = [line for line in text.splitlines() if " = " in line]
    return {
        "hlo_instructions": len(lines),
        "hlo_while_loops": sum(1 for line in lines if re.search(r"\bwhile\(", line)),
        "hlo_dots": sum(1 for line in lines if re.search(r"\bdot\(", line)),
        "lowering_s": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burnin", type=int, default=8)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--multisteps", type=int, default=3)
    parser.add_argument("--atari", action="store_true", help="the Atari size instead")
    parser.add_argument("--which", choices=("ours", "bare", "both"), default="both")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bare-lstm", choices=("unroll", "loop"), default="unroll")
    args = parser.parse_args()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if args.atari:
        config, dtype = atari_config(), np.uint8
    else:
        config = cartpole_config(
            seed=0, burnin=args.burnin, input_length=args.length, multisteps=args.multisteps
        )
        dtype = np.float32
    learner = R2D2Builder(config, observation_dtype=dtype).make_learner()
    fill_replay(learner, config, max(2 * config.batch_size, config.warmup), dtype)
    _, sampled, probabilities = learner.replay.sample(config.batch_size)
    weights = importance_weights(probabilities, len(learner.replay), 0.6).astype(np.float32)
    tensors = {k: tf.convert_to_tensor(v) for k, v in sampled.items()}
    weights_t = tf.convert_to_tensor(weights)
    out = {
        "size": "atari" if args.atari else "cartpole",
        "burnin": config.burnin,
        "input_length": config.input_length,
        "multisteps": config.multisteps,
        "bare_lstm": args.bare_lstm,
    }
    runs = {}
    if args.which in ("ours", "both"):
        plain = tf.function(learner._train_graph)
        xla = tf.function(learner._train_graph, jit_compile=True)
        runs["ours"] = (plain, xla, (tensors, weights_t))
    if args.which in ("bare", "both"):
        fixed = bare_batch(config, sampled, weights)
        unroll = args.bare_lstm == "unroll"
        bare_plain = BareUpdate(config, unroll=unroll)
        bare_plain.build(fixed)
        bare_xla = BareUpdate(config, unroll=unroll, jit_compile=True)
        bare_xla.build(fixed)
        names = [
            "obs",
            "burnin_mask",
            "h",
            "c",
            "actions",
            "returns",
            "bootstrap_discount",
            "bootstrap_index",
            "mask",
            "weights",
        ]
        bare_args = tuple(fixed[n] for n in names)
        runs["bare"] = (bare_plain.update, bare_xla.update, bare_args)
    for name, (plain, xla, call_args) in runs.items():
        log(f"{name}: lowering to HLO ...")
        stats = hlo_stats(xla, *call_args)
        log(f"{name}: {stats}; first XLA call ...")
        start = time.perf_counter()
        xla(*call_args)[1].numpy()
        stats["xla_first_call_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        plain(*call_args)[1].numpy()
        stats["plain_first_call_s"] = round(time.perf_counter() - start, 2)
        log(f"{name}: {stats}; timing ...")
        ms = {"plain": [], "xla": []}
        for r in range(args.repeats):
            for key in ("plain", "xla") if r % 2 == 0 else ("xla", "plain"):
                fn = plain if key == "plain" else xla
                start = time.perf_counter()
                for _ in range(args.updates):
                    fn(*call_args)[1].numpy()
                ms[key].append((time.perf_counter() - start) / args.updates * 1e3)
        stats["plain_ms"] = round(statistics.median(ms["plain"]), 3)
        stats["xla_ms"] = round(statistics.median(ms["xla"]), 3)
        stats["xla_over_plain"] = round(stats["xla_ms"] / stats["plain_ms"], 3)
        runs_out = out.setdefault("results", {})
        runs_out[name] = stats
        log(f"{name}: {stats}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
