"""Runs every benchmark, one after another, and prints one JSON line per benchmark.

`make bench` runs this. The default is a quick pass (minutes) that checks every benchmark
still runs and gives rough figures; `--full` uses each benchmark's own defaults (the
settings behind `benchmarks/RESULTS.md`, about an hour on the 2-core box). Each benchmark
runs in its own process; its JSON goes to `benchmarks/out/<name>.json` and its log to
`benchmarks/out/<name>.log`.

Usage::

    python benchmarks/run_all.py                 # quick pass
    python benchmarks/run_all.py --full          # the RESULTS.md settings
    python benchmarks/run_all.py --only replay weights
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent

BENCHMARKS = {
    "replay": (
        ["bench_replay.py", "--iters", "300", "--repeats", "2", "--capacity", "20000"],
        ["bench_replay.py"],
    ),
    "weights": (["bench_weights.py", "--repeats", "5"], ["bench_weights.py"]),
    "agent": (
        [
            "bench_agent.py",
            "--updates",
            "20",
            "--repeats",
            "2",
            "--actor-steps",
            "2000",
            "--skip-atari",
        ],
        ["bench_agent.py"],
    ),
    "learner": (
        ["bench_learner.py", "--updates", "20", "--repeats", "3", "--skip-atari"],
        ["bench_learner.py"],
    ),
    "startup": (
        ["bench_startup.py", "--sizes", "cartpole", "--repeats", "1"],
        ["bench_startup.py"],
    ),
    "manager": (
        [
            "bench_manager.py",
            "--seconds",
            "40",
            "--repeats",
            "5",
            "--sections",
            "throughput",
            "weights",
        ],
        ["bench_manager.py"],
    ),
    "ray": (
        ["bench_ray.py", "--seconds", "15", "--actors", "1", "2", "--repeats", "5"],
        ["bench_ray.py"],
    ),
    "checkpoint": (["bench_checkpoint.py", "--repeats", "2"], ["bench_checkpoint.py"]),
    "replay_memory": (
        ["bench_replay_memory.py", "--capacity", "200", "--sample-every", "0"],
        ["bench_replay_memory.py"],
    ),
    "frames": (
        ["bench_frames.py", "--capacity", "80", "--repeats", "2"],
        ["bench_frames.py", "--capacity", "300", "--repeats", "10"],
    ),
    "acting": (
        ["bench_acting.py", "--seconds", "0.5", "--ns", "1", "16", "--no-ale"],
        ["bench_acting.py", "--seconds", "2", "--ns", "1", "4", "16", "32", "64"],
    ),
    "learning": (
        ["bench_learning.py", "--env", "cartpole", "--seeds", "0", "--budget", "5000"],
        ["bench_learning.py", "--env", "cartpole", "--seeds", "0", "1", "2"],
    ),
    "keep_best": (
        ["keep_best.py", "--env", "cartpole", "--budget", "2000", "--interval", "1000"],
        ["keep_best.py", "--env", "masked", "--seeds", "0", "1", "2", "3", "4"],
    ),
    "diagnose_collapse": (
        ["diagnose_collapse.py", "--budget", "2000", "--interval", "1000", "--episodes", "2"],
        ["diagnose_collapse.py", "--seed", "0"],
    ),
    "policy_average_sweep": (
        ["policy_average_sweep.py", "--budget", "2000", "--eval-every", "1000", "--episodes", "2"],
        ["policy_average_sweep.py", "--seeds", "0", "1", "2", "3", "4", "5", "6", "7"],
    ),
    "chaos": (["chaos.py", "--minutes", "2"], ["chaos.py"]),
}
"""Name -> (quick arguments, full arguments)."""


def run(name: str, args: list[str], out_dir: pathlib.Path) -> dict:
    """Runs one benchmark script; returns its last JSON line (or the failure)."""
    start = time.perf_counter()
    log_path = out_dir / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [sys.executable, str(HERE / args[0]), *args[1:]],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    seconds = round(time.perf_counter() - start, 1)
    result = _last_json(proc.stdout)
    if proc.returncode != 0 or result is None:
        return {
            "benchmark": name,
            "ok": False,
            "returncode": proc.returncode,
            "seconds": seconds,
            "log": str(log_path),
        }
    (out_dir / f"{name}.json").write_text(proc.stdout)
    return {"benchmark": name, "ok": True, "seconds": seconds, "result": result}


def _last_json(stdout: str) -> dict | None:
    """The benchmark's result: its whole output as one JSON document (some print it
    indented), else its last JSON line (others print one line per run)."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    for line in reversed(stdout.splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the RESULTS.md settings")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="a subset")
    parser.add_argument("--out", default=str(HERE / "out"), help="folder for JSON and logs")
    args = parser.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only or BENCHMARKS:
        quick, full = BENCHMARKS[name]
        print(f"running {name} ...", file=sys.stderr, flush=True)
        summary = run(name, full if args.full else quick, out_dir)
        print(json.dumps(summary), flush=True)
        if not summary["ok"]:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)} (see the logs in {out_dir})")


if __name__ == "__main__":
    main()
