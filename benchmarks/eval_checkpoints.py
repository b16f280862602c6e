"""Greedy evaluation of every checkpoint of a run, beside a random policy.

Rebuilds each checkpoint's network from the configuration it holds, plays `--episodes`
episodes at ε = `--epsilon` (0.01) with it (and with an untrained network of the same
configuration, and a uniformly random policy), prints one JSON line per row, and records
each checkpoint's mean as an evaluation point of the run directory (`eval.jsonl`), so
the learning curve (`python -m r2d2_agent.plot RUN_DIR`) shows it.

Usage (the Atari run of RESULTS.md)::

    python benchmarks/eval_checkpoints.py /work/atari_run/breakout \\
        --checkpoints /work/atari_run/saved --atari ALE/Breakout-v5 --life-loss --episodes 10
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys

import numpy as np


def play(agent, env, episodes: int) -> list[float]:
    """Greedy returns of `agent` (or uniformly random actions when `agent` is None)."""
    if agent is not None:
        history = agent.test(env, nb_episodes=episodes, visualize=False, verbose=0)
        return [float(r) for r in history.history["episode_reward"]]
    rng = np.random.default_rng(0)
    returns = []
    env.reset(seed=0)
    for _ in range(episodes):
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        env.reset()
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the run directory (its eval.jsonl gets the points)")
    parser.add_argument("--checkpoints", help="checkpoint folder (default: RUN_DIR/checkpoints)")
    parser.add_argument("--atari", required=True, help="ALE game id, e.g. ALE/Breakout-v5")
    parser.add_argument("--life-loss", action="store_true", help="a life lost ends an episode")
    parser.add_argument("--r2d3", action="store_true", help="the run used R2D3ImageModel")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=0.01, help="evaluation ε")
    args = parser.parse_args()

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
    from atari import make_atari  # the example's env factory: the same preprocessing

    from r2d2_agent import R2D2Agent, R2D2Config
    from r2d2_agent.callbacks import RunLogCallback
    from r2d2_agent.checkpoints import checkpoint_files, read_checkpoint
    from r2d2_agent.image_models import DQNImageModel, R2D3ImageModel

    make_env = functools.partial(make_atari, args.atari, args.life_loss)
    folder = args.checkpoints or f"{args.run_dir}/checkpoints"
    files = [path for _, path in checkpoint_files(folder)]
    if not files:
        raise SystemExit(f"no checkpoints in {folder}")
    image_model = R2D3ImageModel() if args.r2d3 else DQNImageModel()
    run_log = RunLogCallback(args.run_dir, plot=True)

    def report(row: dict) -> None:
        print(json.dumps(row), flush=True)

    returns = play(None, make_env(), args.episodes)
    report({"policy": "random", "env_steps": 0, "mean_return": float(np.mean(returns))})
    first = read_checkpoint(files[0])
    # ε = 0.01 as usual on Atari (a greedy agent that never presses FIRE stalls Breakout);
    # a small replay, since nothing is trained here.
    config = R2D2Config.from_dict(first.config).replace(
        test_epsilon=args.epsilon, memory_capacity=64, memory_warmup=16
    )
    agent = R2D2Agent(config, image_model)
    agent.compile()
    returns = play(agent, make_env(), args.episodes)
    report({"policy": "untrained", "env_steps": 0, "mean_return": float(np.mean(returns))})
    for path in files:
        state = read_checkpoint(path)
        agent.load_weights(path)
        returns = play(agent, make_env(), args.episodes)
        run_log.log_evaluation(state.counters.env_steps, returns)
        report(
            {
                "policy": pathlib.Path(path).name,
                "env_steps": state.counters.env_steps,
                "learner_updates": state.counters.learner_updates,
                "mean_return": float(np.mean(returns)),
                "returns": returns,
            }
        )


if __name__ == "__main__":
    main()
