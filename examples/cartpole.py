"""R2D2 on CartPole-v1 with an R2D2Manager: 2 actor processes + 1 learner process.

    python examples/cartpole.py --actors 2 --nb-steps 60000 --seed 0
    python examples/cartpole.py --nb-steps 90000 --resume runs/<run>/checkpoints  # continue

Arguments -> env factory -> config -> manager -> train (progress bar, a run directory of
logs and TensorBoard summaries, checkpoints) -> a test agent with the learner's weights ->
greedy evaluation -> the learning curve (`python -m r2d2_agent.plot RUN_DIR` redraws it).
"""

import argparse
import functools
import logging
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback
from r2d2_agent.plot import plot_run
from r2d2_agent.presets import cartpole_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=2, help="actor processes")
    parser.add_argument("--nb-steps", type=int, default=60_000, help="env steps over all actors")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--run-dir", help="run directory (default: runs/<run name>)")
    parser.add_argument("--resume", help="checkpoint file or directory to continue from")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 1. A picklable env factory: every actor process builds its own env from it.
    env_factory = functools.partial(gym.make, "CartPole-v1")

    # 2. Configuration: the CartPole preset (see r2d2_agent/presets.py), seeded.
    config = cartpole_config(seed=args.seed)
    run_dir = args.run_dir or f"runs/CartPole-v1__r2d2__{args.seed}__{int(time.time())}"
    run_log = RunLogCallback(run_dir)  # JSON lines per process + TensorBoard summaries
    callbacks = [run_log, CheckpointCallback(f"{run_dir}/checkpoints", interval=1_000)]
    print(f"run directory: {run_dir}")

    # 3. Train with the manager; it stops at the first limit reached (with --resume,
    #    nb_steps counts from the checkpoint's env steps).
    with R2D2Manager(env_factory, config, actor_num=args.actors, callbacks=callbacks) as manager:
        result = manager.train(
            nb_steps=args.nb_steps, max_seconds=args.max_seconds, resume_from=args.resume
        )
        agent = manager.create_test_agent()
    print(
        f"stopped by {result.stop_reason}: {result.env_steps} env steps "
        f"(per actor {result.actor_env_steps}), {result.learner_updates} learner updates "
        f"in {result.elapsed_seconds:.1f} s; recent mean return "
        f"{result.recent_mean_return()}"
    )

    # 4. Greedy evaluation of the learner's final weights, logged as a point of the curve.
    history = agent.test(env_factory(), nb_episodes=args.eval_episodes, visualize=False, verbose=0)
    returns = history.history["episode_reward"]
    run_log.log_evaluation(result.env_steps, returns)
    print(f"greedy evaluation over {args.eval_episodes} episodes: {np.mean(returns):.1f}")

    # 5. The learning curve, and where everything is.
    print(f"learning curve: {plot_run(run_dir)}")
    print(f"logs: {run_dir}/*.jsonl   TensorBoard: tensorboard --logdir {run_dir}/tensorboard")
    print(f"continue with: python examples/cartpole.py --resume {run_dir}/checkpoints")


if __name__ == "__main__":
    main()
