"""Is burn-in long enough? The recurrent-state diagnostic (Kapturowski et al. 2019, Fig. 1)
on a briefly trained agent, drawn as a figure.

Trains the single-process `R2D2Agent` with a preset, recording one training episode out
of every `--every` (the last `--keep`, so that they span about what the replay holds),
with a greedy evaluation every `--eval-interval` env steps. At the end the learner
computes the Q-value discrepancy by step of the trained window for the four starts
(stored or zero state, with or without burn-in) at the preset's burn-in, and the
stored-state-with-burn-in and zero-state-with-burn-in curves' summaries at the other
`--burnins`. The figure of the means (the paper's statistic) goes to `--output`, the one
of the medians over sequences beside it (`*_median.png`). Prints one JSON report.

Usage::

    python benchmarks/bench_state_discrepancy.py --env masked --seed 0 --nb-steps 25000 \\
        --keep 80 --every 3 --output benchmarks/figures/state_discrepancy_masked_cartpole.png
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import gymnasium as gym
import numpy as np

from r2d2_agent.presets import cartpole_config, masked_cartpole_config
from r2d2_agent.testing import make_masked_cartpole, train_until_solved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from header import report_header  # noqa: E402


def rounded(summary: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in summary.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=["cartpole", "masked"], default="masked")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nb-steps", type=int, default=25_000, help="training env steps")
    parser.add_argument("--eval-interval", type=int, default=2_500, help="env steps")
    parser.add_argument("--keep", type=int, default=80, help="episodes kept")
    parser.add_argument("--every", type=int, default=3, help="record 1 episode in this many")
    parser.add_argument(
        "--burnins", type=int, nargs="*", default=[0, 2, 4, 16, 32], help="other burn-ins"
    )
    parser.add_argument("--output", default="state_discrepancy.png", help="PNG file")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")
    args = parser.parse_args()

    from r2d2_agent import R2D2Agent
    from r2d2_agent.compat import tf
    from r2d2_agent.plot import plot_state_discrepancy

    if args.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    preset = cartpole_config if args.env == "cartpole" else masked_cartpole_config
    make_env = (
        functools.partial(gym.make, "CartPole-v1")
        if args.env == "cartpole"
        else make_masked_cartpole
    )
    config = preset(seed=args.seed)
    agent = R2D2Agent(config)
    agent.compile()
    recorder = agent.record_episodes(keep=args.keep, every=args.every)
    start = time.perf_counter()
    training = train_until_solved(
        agent, make_env, args.nb_steps, eval_interval=args.eval_interval, stop_when_solved=False
    )
    train_s = time.perf_counter() - start

    start = time.perf_counter()
    result = agent.state_discrepancy()
    compute_s = time.perf_counter() - start
    title = (
        f"{args.env} CartPole, seed {args.seed}, after {training['env_steps']:,} env steps: "
        f"burn-in {result.burnin}, {result.nb_sequences} sequences of "
        f"{result.nb_episodes} episodes"
    )
    path = plot_state_discrepancy(result, args.output, title=title)
    median_path = plot_state_discrepancy(
        result, args.output.removesuffix(".png") + "_median.png", title=title, statistic="median"
    )
    other = {}
    for burnin in args.burnins:
        summary = agent.state_discrepancy(burnin=burnin).summary()
        other[burnin] = {
            k: round(v, 4) for k, v in summary.items() if k.startswith(("stored_burnin", "zero_b"))
        }
    lengths = [e.length for e in recorder.episodes]
    report = {
        **report_header("bench_state_discrepancy"),
        "env": args.env,
        "seed": args.seed,
        "config": {
            k: getattr(config, k)
            for k in ("burnin", "input_length", "period", "lstm_units", "actor_sync_interval")
        },
        "env_steps": training["env_steps"],
        "learner_updates": agent.learner.updates,
        "evals": [(s, round(m, 1)) for s, m in training["evals"]],
        "train_s": round(train_s, 1),
        "episodes": {
            "recorded_of": recorder.episodes_started,
            "kept": len(lengths),
            "length_median": float(np.median(lengths)),
        },
        "discrepancy_s": round(compute_s, 2),
        "by_step": {k: [round(float(x), 4) for x in v] for k, v in result.by_step.items()},
        "median_by_step": {
            k: [round(float(x), 4) for x in v] for k, v in result.median_by_step.items()
        },
        "summary": rounded(result.summary()),
        "other_burnins": other,
        "figures": [path, median_path],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
