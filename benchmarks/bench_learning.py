"""Env steps and wall seconds to solve CartPole-v1 and the masked CartPole.

The protocol of the peer benchmarks (shared/peers/RESULTS.md): a greedy 10-episode
evaluation every 2,500 training env steps; solved = first evaluation with mean >= 475;
wall time from the start of training to that evaluation, evaluation time included.
Budget 100,000 env steps per run. Prints one JSON line per run and a summary line with
the medians over seeds (an unsolved run counts at its budget).

Usage::

    python benchmarks/bench_learning.py --env cartpole --seeds 0 1 2
    python benchmarks/bench_learning.py --env masked --seeds 0 1 2
    python benchmarks/bench_learning.py --env masked --no-lstm --seeds 0
    python benchmarks/bench_learning.py --env cartpole --manager --actors 2 --seeds 0
    python benchmarks/bench_learning.py --env cartpole --set multisteps=5 --set epsilon=0.05
    python benchmarks/bench_learning.py --env masked --in-fit-eval --seeds 0 1 2

`--set FIELD=VALUE` overrides a preset field (the value is a Python literal; used for the
ablation table in RESULTS.md).

`--threads 1` (the default) gives TensorFlow one thread, as the peers' runs give torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from r2d2_agent.presets import cartpole_config, masked_cartpole_config
from r2d2_agent.testing import make_masked_cartpole, train_until_solved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overrides import parse_overrides  # noqa: E402  (a sibling module)


def run_agent(
    env: str, seed: int, budget: int, lstm: bool, overrides: dict, in_fit: bool = False
) -> dict:
    from r2d2_agent import R2D2Agent

    preset = cartpole_config if env == "cartpole" else masked_cartpole_config
    config = preset(seed=seed, **overrides)
    if not lstm:
        config = config.replace(lstm_units=0)
    make_env = (
        functools.partial(gym.make, "CartPole-v1") if env == "cartpole" else make_masked_cartpole
    )
    agent = R2D2Agent(config)
    agent.compile()
    if in_fit:
        return run_in_one_fit(agent, make_env, budget)
    result = train_until_solved(agent, make_env, budget)
    return {
        "solved": result["solved_at"] is not None,
        "env_steps": result["solved_at"] or result["env_steps"],
        "wall_s": round(result["solved_wall_s"] or result["wall_s"], 1),
        "evals": [round(m, 1) for _, m in result["evals"]],
    }


def run_in_one_fit(agent: Any, make_env: Callable[[], Any], budget: int) -> dict:
    """The same protocol inside one `fit` call: an `EvaluationCallback` evaluates every
    2,500 env steps on an env of its own (10 greedy episodes, seeded 1,000 once), so no
    training episode is cut at an evaluation (with one env, `fit` starts a new episode
    at each call)."""
    from r2d2_agent.callbacks import EvaluationCallback

    n = agent.config.envs_per_actor
    train_env = make_env() if n == 1 else [make_env() for _ in range(n)]
    evaluation = EvaluationCallback(
        make_env, interval=2_500, episodes=10, stop_at=475.0, seed=1_000
    )
    start = time.perf_counter()
    agent.fit(train_env, nb_steps=budget, callbacks=[evaluation], verbose=0)
    wall = time.perf_counter() - start
    solved = [e.env_steps for e in evaluation.evaluations if e.mean_return >= 475.0]
    return {
        "solved": bool(solved),
        "env_steps": solved[0] if solved else agent.step,
        "wall_s": round(wall, 1),
        "evals": [round(e.mean_return, 1) for e in evaluation.evaluations],
        "protocol": "in one fit",
    }


def run_manager(
    env: str, seed: int, budget: int, actors: int, max_seconds: float, overrides: dict
) -> dict:
    """Trains with the manager to a step budget, then evaluates once (no mid-run evals)."""
    import numpy as np

    from r2d2_agent import R2D2Manager

    preset = cartpole_config if env == "cartpole" else masked_cartpole_config
    make_env = (
        functools.partial(gym.make, "CartPole-v1") if env == "cartpole" else make_masked_cartpole
    )
    start = time.perf_counter()
    with R2D2Manager(make_env, preset(seed=seed, **overrides), actor_num=actors) as manager:
        manager.train(nb_steps=budget, max_seconds=max_seconds)
        agent = manager.create_test_agent()
    wall = time.perf_counter() - start
    history = agent.test(make_env(), nb_episodes=10, visualize=False, verbose=0)
    mean = float(np.mean(history.history["episode_reward"]))
    return {
        "solved": mean >= 475,
        "env_steps": budget,
        "wall_s": round(wall, 1),
        "final_eval10": round(mean, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=["cartpole", "masked"], default="cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--no-lstm", action="store_true", help="lstm_units=0")
    parser.add_argument("--manager", action="store_true", help="train with R2D2Manager")
    parser.add_argument(
        "--in-fit-eval",
        action="store_true",
        help="one fit call with the evaluations in an EvaluationCallback (no episode cut "
        "at an evaluation) instead of fit in chunks of 2,500 env steps",
    )
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="preset override"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="TensorFlow threads (the peers' protocol runs 1-thread jobs)",
    )
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    if args.threads > 0 and not args.manager:
        from r2d2_agent.compat import tf

        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    runs = []
    for seed in args.seeds:
        if args.manager:
            run = run_manager(args.env, seed, args.budget, args.actors, args.max_seconds, overrides)
        else:
            run = run_agent(
                args.env, seed, args.budget, not args.no_lstm, overrides, args.in_fit_eval
            )
        run.update(
            env=args.env,
            seed=seed,
            lstm=not args.no_lstm,
            mode=f"manager({args.actors})" if args.manager else "agent",
            overrides=args.set,
        )
        runs.append(run)
        print(json.dumps(run), flush=True)
    print(
        json.dumps(
            {
                "summary": f"{args.env} {'manager' if args.manager else 'agent'}"
                f"{'' if not args.no_lstm else ' no-lstm'}",
                "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
                "median_env_steps": statistics.median(r["env_steps"] for r in runs),
                "median_wall_s": statistics.median(r["wall_s"] for r in runs),
                "overrides": args.set,
            }
        )
    )


if __name__ == "__main__":
    main()
