"""Throughput of PrioritizedSequenceReplay against cpprb's PrioritizedReplayBuffer.

Measures, at equal capacity, batch size and alpha:

* ``sample(batch) + update_priorities(batch)`` round trips per second, the
  learner's hot path. cpprb's ``sample`` also computes importance-sampling
  weights, so ours is reported both without and with the weights
  ``w = (N * P)^-beta / max w`` computed on the batch in numpy;
* ``add`` throughput, one item per call and ``batch`` items per call.

Two payloads: a tiny one (one float32 field of shape (1,)) so that the
comparison is of the priority trees, and a CartPole R2D2 sequence (35 steps of
4-dim observations plus actions, rewards, discounts and an LSTM state).

Each figure is the median of ``--repeats`` timed runs of ``--iters`` calls
after a warm-up; the runs of all measurements of a payload are interleaved.
Prints one JSON object to stdout; progress goes to stderr.

Usage::

    python benchmarks/bench_replay.py --capacity 100000 --batch 64 --iters 2000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import time
from collections.abc import Callable
from importlib import metadata

import numpy as np

from r2d2_agent.replay.prioritized import PRIORITY_EPSILON, PrioritizedSequenceReplay

logger = logging.getLogger("bench_replay")

TINY_SPEC = {"x": ((1,), np.float32)}
CARTPOLE_SPEC = {
    "obs": ((35, 4), np.float32),
    "action": ((35,), np.int32),
    "reward": ((35,), np.float32),
    "discount": ((35,), np.float32),
    "recurrent_state": ((2, 64), np.float32),
}
WARMUP = 50


Step = Callable[[int], None]


def _measure(steps: dict[str, tuple[Step, int]], iters: int, repeats: int) -> dict[str, float]:
    """Items per second of each step: median of ``repeats`` timed runs of ``iters`` calls.

    ``steps`` maps a name to ``(step, items_per_call)``. Each step is warmed up
    first; the timed runs are then interleaved (repeat 1 of every step, then
    repeat 2, ...) so that a change of load on a shared machine hits all
    steps alike instead of whichever happens to run at that moment.
    """
    for step, _ in steps.values():
        for i in range(WARMUP):
            step(i)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, (step, per_call) in steps.items():
            start = time.perf_counter()
            for i in range(iters):
                step(WARMUP + i)
            rates[name].append(iters * per_call / (time.perf_counter() - start))
    return {name: round(statistics.median(r), 1) for name, r in rates.items()}


def _random_fields(rng: np.random.Generator, spec, n: int) -> dict[str, np.ndarray]:
    return {
        name: rng.random((n, *shape)).astype(dtype)
        if np.dtype(dtype).kind == "f"
        else rng.integers(0, 2, size=(n, *shape)).astype(dtype)
        for name, (shape, dtype) in spec.items()
    }


def _ours_steps(spec, args, rng: np.random.Generator) -> dict[str, tuple[Step, int]]:
    cap, batch = args.capacity, args.batch
    chunk = _random_fields(rng, spec, min(cap, 10_000))
    new_prios = rng.random((args.iters + WARMUP, batch))

    replay = PrioritizedSequenceReplay(cap, spec, args.alpha, seed=args.seed)
    n_chunk = len(next(iter(chunk.values())))
    for _ in range(-(-cap // n_chunk)):
        replay.add_batch(chunk, rng.random(n_chunk))

    def sample_update(i: int) -> None:
        indices, _, _ = replay.sample(batch)
        replay.update_priorities(indices, new_prios[i])

    def sample_weights_update(i: int) -> None:
        indices, _, probs = replay.sample(batch)
        weights = (len(replay) * probs) ** -args.beta
        weights /= weights.max()
        replay.update_priorities(indices, new_prios[i])

    one = {k: v[0] for k, v in chunk.items()}
    some = {k: v[:batch] for k, v in chunk.items()}
    return {
        "sample_update_per_s": (sample_update, 1),
        "sample_is_weights_update_per_s": (sample_weights_update, 1),
        "add_items_per_s": (lambda i: replay.add(one, 1.0), 1),
        "add_batch_items_per_s": (lambda i: replay.add_batch(some, new_prios[i]), batch),
    }


def _cpprb_steps(spec, args, rng: np.random.Generator) -> dict[str, tuple[Step, int]]:
    import cpprb

    cap, batch = args.capacity, args.batch
    env_dict = {name: {"shape": shape, "dtype": dtype} for name, (shape, dtype) in spec.items()}
    chunk = _random_fields(rng, spec, min(cap, 10_000))
    new_prios = rng.random((args.iters + WARMUP, batch))

    buffer = cpprb.PrioritizedReplayBuffer(cap, env_dict, alpha=args.alpha, eps=PRIORITY_EPSILON)
    n_chunk = len(next(iter(chunk.values())))
    for _ in range(-(-cap // n_chunk)):
        buffer.add(**chunk, priorities=rng.random(n_chunk))

    def sample_update(i: int) -> None:
        sample = buffer.sample(batch, beta=args.beta)
        buffer.update_priorities(sample["indexes"], new_prios[i])

    one = {k: v[0] for k, v in chunk.items()}
    some = {k: v[:batch] for k, v in chunk.items()}
    return {
        "sample_is_weights_update_per_s": (sample_update, 1),
        "add_items_per_s": (lambda i: buffer.add(**one, priorities=1.0), 1),
        "add_batch_items_per_s": (lambda i: buffer.add(**some, priorities=new_prios[i]), batch),
    }


def _compare(spec, args) -> dict[str, object]:
    logger.info("measuring payload %s", list(spec))
    steps = {
        f"ours/{k}": v for k, v in _ours_steps(spec, args, np.random.default_rng(args.seed)).items()
    }
    cpprb_steps = _cpprb_steps(spec, args, np.random.default_rng(args.seed))
    steps.update({f"cpprb/{k}": v for k, v in cpprb_steps.items()})
    rates = _measure(steps, args.iters, args.repeats)
    ours = {k.split("/", 1)[1]: v for k, v in rates.items() if k.startswith("ours/")}
    theirs = {k.split("/", 1)[1]: v for k, v in rates.items() if k.startswith("cpprb/")}
    ratio = ours["sample_is_weights_update_per_s"] / theirs["sample_is_weights_update_per_s"]
    item_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in spec.values())
    return {
        "item_bytes": item_bytes,
        "ours": ours,
        "cpprb": theirs,
        "ours_over_cpprb_sample_is_weights_update": round(ratio, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iters", type=int, default=2_000, help="calls per timed repeat")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--beta", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

    start = time.perf_counter()
    report = {
        "config": {
            **vars(args),
            "warmup_calls": WARMUP,
            "statistic": f"median of {args.repeats} interleaved repeats",
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpprb": metadata.version("cpprb"),
            "machine": platform.machine(),
        },
        "tiny_payload": _compare(TINY_SPEC, args),
        "cartpole_sequence_payload": _compare(CARTPOLE_SPEC, args),
    }
    report["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
