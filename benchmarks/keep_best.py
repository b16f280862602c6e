"""The policy a run ends with: the last weights, or the best evaluated ones (issue 24).

Once solved, the masked CartPole's greedy evaluations swing (RESULTS.md, "Staying
solved"). `EvaluationCallback` evaluates the greedy policy every `--interval` env steps
on an env of its own and keeps the best weights. This trains the single-process agent
once per seed with the callback attached (`restore_best=False`, so both policies can be
measured) and then plays `--final-episodes` greedy episodes on a fresh env (seeded
20,000 + seed: episodes neither the training nor the callback saw) with the last
weights and with the best evaluated ones. One JSON line per seed:

    python benchmarks/keep_best.py --env masked --seeds 0 1 2 3 4 --budget 60000
    python benchmarks/keep_best.py --env masked --seeds 0 --budget 150000 \\
        --set lstm_units=64 burnin=10 input_length=20 learning_rate=0.0005 \\
        target_update_interval=500
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from header import report_header  # noqa: E402
from memory_suite import parse_overrides  # noqa: E402

from r2d2_agent import R2D2Agent, presets  # noqa: E402
from r2d2_agent.callbacks import EvaluationCallback  # noqa: E402
from r2d2_agent.envs.masked_cartpole import make_masked_cartpole  # noqa: E402

ENVS = {
    "cartpole": (partial(gym.make, "CartPole-v1"), presets.cartpole_config),
    "masked": (make_masked_cartpole, presets.masked_cartpole_config),
}


def play(agent: R2D2Agent, make_env: Any, episodes: int, seed: int) -> float:
    """Mean return of `episodes` greedy episodes on a fresh env seeded `seed`."""
    env = make_env()
    env.reset(seed=seed)
    history = agent.test(env, nb_episodes=episodes, visualize=False, verbose=0)
    env.close()
    return float(np.mean(history.history["episode_reward"]))


def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Trains one seed with the callback; returns both policies' final means."""
    from r2d2_agent.compat import tf  # noqa: PLC0415

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    make_env, preset = ENVS[args.env]
    config = preset(seed=seed, **parse_overrides(args.set))
    agent = R2D2Agent(config)
    agent.compile()
    evaluation = EvaluationCallback(
        make_env, interval=args.interval, episodes=args.episodes, seed=10_000 + seed
    )
    start = time.perf_counter()
    agent.fit(make_env(), nb_steps=args.budget, callbacks=[evaluation], verbose=0)
    wall = time.perf_counter() - start
    last = play(agent, make_env, args.final_episodes, 20_000 + seed)
    agent.learner.set_weights(evaluation.best_weights)
    best = play(agent, make_env, args.final_episodes, 20_000 + seed)
    return {
        "env": args.env,
        "seed": seed,
        "budget": args.budget,
        "set": args.set,
        "curve": [[e.env_steps, round(e.mean_return, 1)] for e in evaluation.evaluations],
        "best_at": evaluation.best.env_steps,
        "best_eval_mean": evaluation.best.mean_return,
        "final_last": round(last, 1),
        "final_best": round(best, 1),
        "final_episodes": args.final_episodes,
        "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="masked")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget", type=int, default=60_000, help="training env steps")
    parser.add_argument("--interval", type=int, default=5_000, help="env steps between evals")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation")
    parser.add_argument("--final-episodes", type=int, default=100)
    parser.add_argument("--set", nargs="*", default=[], help="config overrides FIELD=VALUE")
    args = parser.parse_args()
    print(json.dumps(report_header("keep_best")))
    for seed in args.seeds:
        print(json.dumps(run(args, seed)), flush=True)


if __name__ == "__main__":
    main()
