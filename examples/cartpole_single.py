"""R2D2 on CartPole-v1 in one process, read top to bottom.

    python examples/cartpole_single.py --nb-steps 30000 --seed 0

Arguments -> config -> agent -> train (with TensorBoard metrics) -> greedy evaluation.
"""

import argparse
import logging
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import CheckpointCallback, TensorBoardCallback
from r2d2_agent.presets import cartpole_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nb-steps", type=int, default=30_000, help="training env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--weights", default="runs/cartpole_single.h5", help="checkpoint file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 1. Configuration: the CartPole preset (see r2d2_agent/presets.py), seeded.
    config = cartpole_config(seed=args.seed)
    run_name = f"CartPole-v1__r2d2_single__{args.seed}__{int(time.time())}"

    # 2. The agent: network, learner and actor in this process.
    agent = R2D2Agent(config)
    agent.compile()

    # 3. Train; keras-rl's interval logger prints progress, TensorBoard gets the metrics.
    callbacks = [
        TensorBoardCallback(f"runs/{run_name}"),
        CheckpointCallback(args.weights, interval=10_000),
    ]
    start = time.perf_counter()
    history = agent.fit(
        gym.make("CartPole-v1"),
        nb_steps=args.nb_steps,
        callbacks=callbacks,
        verbose=1,
        log_interval=5_000,
    )
    train_s = time.perf_counter() - start
    returns = history.history["episode_reward"]

    # 4. Greedy evaluation.
    result = agent.test(
        gym.make("CartPole-v1"), nb_episodes=args.eval_episodes, visualize=False, verbose=0
    )
    eval_mean = float(np.mean(result.history["episode_reward"]))
    print(
        f"trained {args.nb_steps} env steps in {train_s:.1f} s "
        f"({len(returns)} episodes, last 10 mean {np.mean(returns[-10:]):.1f}); "
        f"greedy evaluation over {args.eval_episodes} episodes: {eval_mean:.1f}"
    )


if __name__ == "__main__":
    main()
