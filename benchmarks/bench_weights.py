"""Benchmark: weights through shared memory (SharedWeights) vs a pickled mp.Queue.

For a CartPole-sized and an Atari-sized R2D2 network (float32), it measures:

* ``publish_ms``: ``SharedWeights.publish`` (the learner's cost);
* ``read_into_out_ms``: an attached reader's ``read(out=preallocated)`` (an actor's pull);
* ``read_alloc_ms``: ``read()`` that allocates fresh arrays;
* ``version_check_ms``: ``version()`` alone (what an actor pays when nothing is new);
* ``barrier_ms``: one of the seqlock's memory barriers (two per publish, two per read), its
  share of a read and of a publish, and the read again without the barriers (A/B);
* ``mp_queue_put_get_ack_ms``: the same list of arrays ``put`` on a spawn-context
  ``multiprocessing.Queue``, got and unpickled by another process, which answers with a
  tiny ack on a second queue (one full transfer round trip).

All values are medians over ``--repeats`` in milliseconds. One JSON object is printed.

Usage::

    python benchmarks/bench_weights.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import pickle
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from r2d2_agent.distributed.mp import shared_weights
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec, memory_barrier

Shapes = list[tuple[int, ...]]


def cartpole_shapes() -> Shapes:
    """Dense(4->64), LSTM(64->64), dueling Dense 64->64, V 64->1, A 64->2."""
    return [
        (4, 64),
        (64,),
        (64, 256),
        (64, 256),
        (256,),
        (64, 64),
        (64,),
        (64, 1),
        (1,),
        (64, 2),
        (2,),
    ]


def atari_shapes() -> Shapes:
    """Nature conv torso, LSTM(3136->512), Dense 512->512, V 512->1, A 512->18."""
    return [
        (8, 8, 4, 32),
        (32,),
        (4, 4, 32, 64),
        (64,),
        (3, 3, 64, 64),
        (64,),
        (3136, 2048),
        (512, 2048),
        (2048,),
        (512, 512),
        (512,),
        (512, 1),
        (1,),
        (512, 18),
        (18,),
    ]


def _median_ms(fn: Callable[[], object], repeats: int, inner: int = 1) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return round(statistics.median(times) * 1e3, 6)


def _echo_child(inq: multiprocessing.Queue, outq: multiprocessing.Queue) -> None:
    """Spawn child: gets (and unpickles) each weight list, answers with a tiny ack."""
    while True:
        item = inq.get()
        if item is None:
            return
        outq.put(len(item))


def bench_set(shapes: Shapes, repeats: int, inq, outq) -> dict:
    """Measures one weight set; returns a dict of medians in milliseconds."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    spec = WeightsSpec.from_arrays(arrays)
    result: dict = {
        "n_arrays": len(arrays),
        "nbytes": spec.nbytes,
        "pickled_bytes": len(pickle.dumps(arrays, pickle.HIGHEST_PROTOCOL)),
    }
    with SharedWeights.create(spec, name_prefix="r2d2b") as owner:
        owner.publish(arrays)  # warm-up: touches every page of the segment
        result["publish_ms"] = _median_ms(lambda: owner.publish(arrays), repeats)
        with SharedWeights.attach(owner.handle) as reader:
            out = spec.allocate()
            reader.read(out=out)
            result["read_into_out_ms"] = _median_ms(lambda: reader.read(out=out), repeats)
            result["read_alloc_ms"] = _median_ms(reader.read, repeats)
            result["version_check_ms"] = _median_ms(reader.version, repeats, inner=1000)
            # The seqlock's memory barriers: two per publish and two per read.
            result["barrier_ms"] = _median_ms(memory_barrier, repeats, inner=1000)
            result["barriers_share_of_read"] = round(
                2 * result["barrier_ms"] / result["read_into_out_ms"], 4
            )
            result["barriers_share_of_publish"] = round(
                2 * result["barrier_ms"] / result["publish_ms"], 4
            )
            barrier = shared_weights.memory_barrier
            shared_weights.memory_barrier = lambda: None  # A/B: the same read without them
            try:
                result["read_into_out_without_barriers_ms"] = _median_ms(
                    lambda: reader.read(out=out), repeats
                )
            finally:
                shared_weights.memory_barrier = barrier

    def round_trip() -> None:
        inq.put(arrays)
        outq.get()

    round_trip()  # warm-up
    result["mp_queue_put_get_ack_ms"] = _median_ms(round_trip, repeats)
    result["queue_over_shm_read_ratio"] = round(
        result["mp_queue_put_get_ack_ms"] / max(result["read_into_out_ms"], 1e-9), 1
    )
    return result


@contextlib.contextmanager
def echo_child() -> Iterator[tuple[Any, Any]]:
    """A spawn child that echoes what it gets (the pickled-queue baseline's far end)."""
    ctx = multiprocessing.get_context("spawn")
    inq, outq = ctx.Queue(maxsize=1), ctx.Queue()
    child = ctx.Process(target=_echo_child, args=(inq, outq), daemon=True)
    child.start()
    try:
        yield inq, outq
    finally:
        inq.put(None)
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50, help="timed repeats per measure")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    with echo_child() as (inq, outq):
        sets = {
            "cartpole": bench_set(cartpole_shapes(), args.repeats, inq, outq),
            "atari": bench_set(atari_shapes(), args.repeats, inq, outq),
        }
    report = {
        "benchmark": "bench_weights",
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "repeats": args.repeats,
        "unit": "ms (median)",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": f"{platform.system()} {platform.machine()}, {multiprocessing.cpu_count()} cpus",
        "sets": sets,
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
