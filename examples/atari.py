"""R2D2 on an Atari game with an R2D2Manager (needs `pip install -e ".[atari]"`).

    python examples/atari.py --env ALE/Pong-v5 --actors 4 --nb-steps 2000000

Frames are preprocessed by gymnasium's `AtariPreprocessing` (84x84 grayscale, frame
skip 4, no sticky-action changes) and stacked by R2D2 itself (`input_sequence=4`,
`InputType.GRAY_2ch`). The image torso is `DQNImageModel`; pass `--r2d3` for the
residual `R2D3ImageModel`. On this 2-core CPU machine this only demonstrates the
wiring: a learner update at the paper's size takes seconds here (see benchmarks).
"""

import argparse
import functools
import logging
import os
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import InputType, R2D2Config, R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback
from r2d2_agent.image_models import DQNImageModel, R2D3ImageModel
from r2d2_agent.replay import largest_memory_capacity


def make_atari(env_id: str) -> gym.Env:
    """An Atari env with the standard DQN preprocessing (a picklable module function)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1)
    return gym.wrappers.AtariPreprocessing(
        env, frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--nb-steps", type=int, default=2_000_000)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--r2d3", action="store_true", help="use the R2D3 residual torso")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    env_factory = functools.partial(make_atari, args.env)
    probe = env_factory()
    nb_actions = int(probe.action_space.n)
    probe.close()

    # The paper's settings, with the batch and the replay sized for one machine: the
    # largest replay (in sequences; every frame stored once, as uint8) that fits in half
    # of this machine's memory, from the estimate.
    config = R2D2Config(
        input_shape=(84, 84),
        nb_actions=nb_actions,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        batch_size=32,
        seed=args.seed,
    )
    half_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    capacity = min(config.memory_capacity, largest_memory_capacity(config, half_memory))
    config = config.replace(memory_capacity=capacity)
    image_model = R2D3ImageModel() if args.r2d3 else DQNImageModel()
    run_dir = f"runs/{args.env.replace('/', '_')}__r2d2__{args.seed}__{int(time.time())}"
    callbacks = [
        RunLogCallback(run_dir, plot=True),  # logs, TensorBoard, learning_curve.png
        CheckpointCallback(f"{run_dir}/checkpoints", interval=2_500),
    ]
    print(f"run directory: {run_dir}")

    with R2D2Manager(
        env_factory, config, actor_num=args.actors, image_model=image_model, callbacks=callbacks
    ) as manager:
        result = manager.train(nb_steps=args.nb_steps, max_seconds=args.max_seconds)
        agent = manager.create_test_agent()
    print(
        f"stopped by {result.stop_reason}: {result.env_steps} env steps "
        f"(per actor {result.actor_env_steps}), {result.learner_updates} learner updates "
        f"in {result.elapsed_seconds:.1f} s; recent mean return "
        f"{result.recent_mean_return()}"
    )
    history = agent.test(env_factory(), nb_episodes=3, visualize=False, verbose=0)
    print(f"greedy evaluation: {np.mean(history.history['episode_reward']):.1f}")


if __name__ == "__main__":
    main()
