"""Resident memory of the replay against its estimate, filled past capacity, and the peak
of restoring it from a checkpoint.

For raw and zstd-compressed frames, each in a fresh process: an Atari-sized replay
(84x84 uint8 frames, 4 stacked, 40 burn-in + 80 trained + 5 look-ahead, period 40) of
``--capacity`` sequences is filled with ``--passes`` times its capacity of sequences
whose frames come from ``--frames`` (ALE frames of `record_ale_frames.py`; random bytes
without it, which do not compress). Measured after every fifth of a pass: the growth of
the process's anonymous resident memory (`RssAnon`) since before the replay was made,
against `estimate_replay_bytes(config)` (what the budget and the refusal count), and the
bytes the replay says it holds (`replay.nbytes`, allocated arrays; compressed: the arena).

Then the replay goes into a checkpoint (`write_checkpoint`, with tiny weights) and, in
another fresh process, a new replay of the same config restores it as the learner does
(`R2D2Learner.restore`: `ReplaySnapshot.state()`, then `restore_state`): the peak resident
memory of the restore (`VmHWM`, reset just before) against the bytes of the replay's
arrays (`ReplaySnapshot.nbytes`), i.e. how many copies of the replay the restore holds at
its peak (1.0: only the replay itself), and the peak of what it allocates beyond the
replay's own arrays (tracemalloc, started after the replay was made).

Prints one JSON object.

Usage::

    python benchmarks/record_ale_frames.py --env ALE/Pong-v5 --frames 20000 -o frames_pong.npy
    python benchmarks/bench_replay_memory.py --frames frames_pong.npy [--capacity 2000]
        [--passes 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from r2d2_agent.checkpoints import (
    ReplaySnapshot,
    TrainingCounters,
    TrainingState,
    config_as_data,
    read_checkpoint,
    write_checkpoint,
)
from r2d2_agent.config import R2D2Config
from r2d2_agent.replay import estimate_replay_bytes
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_process import in_fresh_process  # noqa: E402
from header import report_header  # noqa: E402
from replay_fill import atari_sized_config, fill_replay  # noqa: E402

STEPS_PER_PASS = 5


def status_kib(field: str) -> int:
    """A field of /proc/self/status, in KiB (e.g. RssAnon, VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> None:
    """Sets VmHWM to the current resident memory (Linux: /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def mib(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


def replay_config(capacity: int, compression: str | None) -> R2D2Config:
    return atari_sized_config().replace(memory_capacity=capacity, frame_compression=compression)


class SamplingReplay:
    """A replay that also samples a batch every `every` sequences added, as a learner
    training beside its actors does (sampling decompresses, so memory is reused)."""

    def __init__(self, replay, every: int, batch_size: int) -> None:
        self.replay = replay
        self.every = every
        self.batch_size = batch_size
        self.added = 0

    def add(self, record, stream: int = 0) -> int | None:
        key = self.replay.add(record, stream)
        self.added += 1
        if self.every and self.added % self.every == 0 and len(self.replay) >= self.batch_size:
            self.replay.sample(self.batch_size)
        return key


def fill(
    frames_path: str | None,
    capacity: int,
    passes: float,
    compression: str | None,
    path: str,
    sample_every: int,
) -> dict:
    """Fills a replay `passes` times over, measuring memory; writes it to `path`."""
    config = replay_config(capacity, compression)
    recorded = np.load(frames_path, mmap_mode="r") if frames_path else None  # file-backed
    estimate = estimate_replay_bytes(config)
    base = status_kib("RssAnon") * 1024
    replay = R2D2Builder(config).make_replay()
    sampling = SamplingReplay(replay, sample_every, config.batch_size)
    points = []
    chunk = max(1, capacity // STEPS_PER_PASS)
    added = 0
    start = time.perf_counter()
    while added < passes * capacity:
        count = min(chunk, int(passes * capacity) - added)
        fill_replay(sampling, config, count, np.uint8, seed=added, recorded=recorded)
        added += count
        growth = status_kib("RssAnon") * 1024 - base
        points.append(
            {
                "passes": round(added / capacity, 2),
                "rss_growth_mib": mib(growth),
                "rss_over_estimate": round(growth / estimate, 3),
                "replay_nbytes_mib": mib(replay.nbytes),
            }
        )
    fill_seconds = time.perf_counter() - start
    weights = [np.zeros(4, np.float32)]
    state = TrainingState(
        online_weights=weights,
        target_weights=weights,
        optimizer_weights=weights,
        weight_names=("w",),
        optimizer_names=("m",),
        counters=TrainingCounters(learner_updates=1),
        config=config_as_data(config),
        library_version="bench",
        replay=ReplaySnapshot.from_state(replay.export_state(copy=False)),
    )
    write_checkpoint(path, state)
    return {
        "compression": compression or "raw",
        "capacity": capacity,
        "sequences_added": added,
        "batches_sampled": sampling.added // sample_every if sample_every else 0,
        "frames_held": replay.frames_stored,
        "estimate_mib": mib(estimate),
        "fill_seconds": round(fill_seconds, 1),
        "points": points,
        "max_rss_over_estimate": max(p["rss_over_estimate"] for p in points),
        "checkpoint_mib": mib(os.path.getsize(path)),
    }


def restore_replay(replay, checkpoint: TrainingState) -> None:
    """What `R2D2Learner.restore` does with a checkpoint's replay."""
    replay_state = checkpoint.replay.state()  # the arrays stay in the file
    replay.check_state(replay_state)
    replay.restore_state(replay_state)


def restore(capacity: int, compression: str | None, path: str) -> dict:
    """Restores the replay of `path` into a new one as the learner does; peak memory."""
    config = replay_config(capacity, compression)
    checkpoint = read_checkpoint(path)
    one_copy = checkpoint.replay.nbytes  # the replay's arrays, as the file holds them
    replay = R2D2Builder(config).make_replay()
    reset_peak_rss()
    peak_base = status_kib("VmHWM") * 1024
    tracemalloc.start()
    start = time.perf_counter()
    restore_replay(replay, checkpoint)
    seconds = time.perf_counter() - start
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = status_kib("VmHWM") * 1024 - peak_base
    return {
        "compression": compression or "raw",
        "sequences": len(replay),
        "restore_seconds": round(seconds, 2),
        "replay_arrays_mib": mib(one_copy),
        "peak_rss_growth_mib": mib(peak),
        "peak_copies": round(peak / one_copy, 2),
        "traced_peak_mib": mib(traced_peak),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", help=".npy of uint8 (N, 84, 84) frames; random without")
    parser.add_argument("--capacity", type=int, default=2000, help="sequences")
    parser.add_argument("--passes", type=float, default=1.5, help="capacities of sequences")
    parser.add_argument(
        "--sample-every", type=int, default=4, help="sequences added per batch sampled (0: none)"
    )
    parser.add_argument(
        "--only", choices=["raw", "zstd"], help="measure one frame store (default: both)"
    )
    args = parser.parse_args()
    report: dict = {**report_header("bench_replay_memory"), "frames": args.frames, "runs": []}
    with tempfile.TemporaryDirectory() as directory:
        for compression in (None, "zstd"):
            if args.only and args.only != (compression or "raw"):
                continue
            path = os.path.join(directory, f"{compression or 'raw'}.h5")
            filled = in_fresh_process(
                fill,
                args.frames,
                args.capacity,
                args.passes,
                compression,
                path,
                args.sample_every,
            )
            restored = in_fresh_process(restore, args.capacity, compression, path)
            report["runs"].append({**filled, "restore": restored})
            print(json.dumps(report["runs"][-1]), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
