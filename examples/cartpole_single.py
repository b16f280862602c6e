"""R2D2 on CartPole-v1 in one process, read top to bottom.

    python examples/cartpole_single.py --nb-steps 30000 --seed 0

Arguments -> config -> agent -> train (a run directory of logs and TensorBoard metrics,
checkpoints) -> greedy evaluation -> the learning curve.
"""

import argparse
import logging
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback
from r2d2_agent.presets import cartpole_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nb-steps", type=int, default=30_000, help="training env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--run-dir", help="run directory (default: runs/<run name>)")
    parser.add_argument("--resume", help="checkpoint file or directory to continue from")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 1. Configuration: the CartPole preset (see r2d2_agent/presets.py), seeded.
    config = cartpole_config(seed=args.seed)
    run_dir = args.run_dir or f"runs/CartPole-v1__r2d2_single__{args.seed}__{int(time.time())}"

    # 2. The agent: network, learner and actor in this process.
    agent = R2D2Agent(config)
    agent.compile()

    # 3. Train; keras-rl's interval logger prints progress, the run directory gets the
    #    episodes, losses and TensorBoard summaries, and the picture at the end.
    run_log = RunLogCallback(run_dir, plot=True)
    callbacks = [run_log, CheckpointCallback(f"{run_dir}/checkpoints", interval=10_000)]
    print(f"run directory: {run_dir}")
    start = time.perf_counter()
    history = agent.fit(
        gym.make("CartPole-v1"),
        nb_steps=args.nb_steps,
        callbacks=callbacks,
        verbose=1,
        log_interval=5_000,
        resume_from=args.resume,
    )
    train_s = time.perf_counter() - start
    returns = history.history["episode_reward"]

    # 4. Greedy evaluation (logged by the run directory as an evaluation point).
    result = agent.test(
        gym.make("CartPole-v1"),
        nb_episodes=args.eval_episodes,
        visualize=False,
        verbose=0,
        callbacks=[run_log],
    )
    eval_mean = float(np.mean(result.history["episode_reward"]))
    print(
        f"trained {args.nb_steps} env steps in {train_s:.1f} s "
        f"({len(returns)} episodes, last 10 mean {np.mean(returns[-10:]):.1f}); "
        f"greedy evaluation over {args.eval_episodes} episodes: {eval_mean:.1f}"
    )
    print(f"learning curve: {run_log.plot_path} (redraw: python -m r2d2_agent.plot {run_dir})")


if __name__ == "__main__":
    main()
