"""Ablations in the peers' protocol: one preset field changed at a time, seeds side by side.

Each variant is a name and a list of preset overrides; each (variant, seed) runs as its
own `bench_learning.py` process (TensorFlow with 1 thread), `--jobs` at a time. Results
go to a JSONL file, one line per run, and runs already in that file are skipped, so a
second call adds variants without rerunning the first. Runs are keyed by their overrides
only: after a preset changes, start a new `--out` file. At the end it prints one JSON
line per variant (solved, median and mean env steps, median wall seconds) and, with
`--markdown`, the table for `benchmarks/RESULTS.md`.

Usage::

    python benchmarks/ablate.py --env cartpole --seeds 0 1 2 3 4 --jobs 2 \\
        --out benchmarks/out/ablate_cartpole.jsonl \\
        --variant preset \\
        --variant "eps ramp:epsilon_start=1.0,epsilon_anneal_steps=5000" \\
        --variant "lr 2e-3:learning_rate=2e-3" --markdown

A variant is `NAME` (the preset) or `NAME:FIELD=VALUE,FIELD=VALUE` (values are Python
literals, as `bench_learning.py --set` takes them; a tuple value needs no commas inside).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_variant(text: str) -> tuple[str, list[str]]:
    """Splits a variant: `"lr:learning_rate=2e-3,multisteps=5"` -> the name `"lr"` and
    `["learning_rate=2e-3", "multisteps=5"]`."""
    name, _, sets = text.partition(":")
    overrides = [s.strip() for s in sets.split(",") if s.strip()]
    for pair in overrides:
        if "=" not in pair:
            raise SystemExit(f"variant {name!r}: expected FIELD=VALUE, got {pair!r}")
    return name.strip(), overrides


def run_one(env: str, seed: int, budget: int, overrides: list[str]) -> dict:
    """One `bench_learning.py` run; returns its JSON line (or a failure record)."""
    cmd = [sys.executable, str(HERE / "bench_learning.py"), "--env", env, "--seeds", str(seed)]
    cmd += ["--budget", str(budget)]
    for pair in overrides:
        cmd += ["--set", pair]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-2000:], "seed": seed, "env": env, "overrides": overrides}
    return json.loads(lines[0])


def summarise(name: str, runs: list[dict]) -> dict:
    steps = [r["env_steps"] for r in runs]
    return {
        "variant": name,
        "overrides": runs[0]["overrides"] if runs else [],
        "seeds": [r["seed"] for r in runs],
        "env_steps": steps,
        "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
        "median_env_steps": statistics.median(steps) if steps else None,
        "mean_env_steps": round(statistics.fmean(steps)) if steps else None,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs) if runs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=["cartpole", "masked"], default="cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (1 thread each)")
    parser.add_argument("--variant", action="append", required=True, metavar="NAME[:F=V,...]")
    parser.add_argument("--out", type=Path, required=True, help="JSONL of all runs (appended)")
    parser.add_argument("--markdown", action="store_true", help="print the RESULTS.md table")
    args = parser.parse_args()

    variants = [parse_variant(v) for v in args.variant]
    done: dict[tuple[str, tuple[str, ...], int], dict] = {}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            run = json.loads(line)
            if "error" not in run:
                done[(run["env"], tuple(run["overrides"]), run["seed"])] = run
    todo = [
        (overrides, seed)
        for _, overrides in variants
        for seed in args.seeds
        if (args.env, tuple(overrides), seed) not in done
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, args.out.open("a") as out:
        futures = {
            pool.submit(run_one, args.env, seed, args.budget, overrides): (overrides, seed)
            for overrides, seed in todo
        }
        for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
            overrides, seed = futures[future]
            run = future.result()
            if "error" in run:
                print(f"FAILED {overrides} seed {seed}:\n{run['error']}", file=sys.stderr)
                continue
            out.write(json.dumps(run) + "\n")
            out.flush()
            done[(args.env, tuple(overrides), seed)] = run
            print(
                f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {overrides} seed {seed}: "
                f"{run['env_steps']} env steps, {run['wall_s']} s, solved {run['solved']}",
                file=sys.stderr,
                flush=True,
            )

    rows = []
    for name, overrides in variants:
        runs = [
            done[(args.env, tuple(overrides), s)]
            for s in args.seeds
            if (args.env, tuple(overrides), s) in done
        ]
        rows.append(summarise(name, runs))
        print(json.dumps(rows[-1]))
    if args.markdown:
        header = ["variant", "overrides", "env steps per seed", "solved", "median", "mean"]
        print("\n| " + " | ".join([*header, "median wall s"]) + " |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for row in rows:
            per_seed = " / ".join(f"{s:,}" for s in row["env_steps"])
            sets = ", ".join(f"`{o}`" for o in row["overrides"]) or "(preset)"
            print(
                f"| {row['variant']} | {sets} | {per_seed} | {row['solved']} | "
                f"{row['median_env_steps']:,} | {row['mean_env_steps']:,} | "
                f"{row['median_wall_s']} |"
            )


if __name__ == "__main__":
    main()
