"""Your own convolutional torso for R2D2: an `ImageModel` subclass, end to end.

    python examples/custom_image_model.py --nb-steps 15000 --seed 0

The task is Catch, a pixel game small enough to learn in minutes on a CPU: a ball falls
from the top row of a 10x5 board; the paddle on the bottom row moves left, stays or moves
right; +1 for catching the ball, -1 for missing it. The agent sees the board as a 10x5
grayscale image. `SmallConv` is the user's network: R2D2 hands it the frames scaled to
[0, 1] and puts its LSTM and dueling head on top of whatever it returns.

Arguments -> the env -> the ImageModel -> config -> manager -> train -> greedy test.
"""

import argparse
import functools
import logging

import gymnasium as gym
import numpy as np

from r2d2_agent import InputType, R2D2Config, R2D2Manager
from r2d2_agent.compat import keras
from r2d2_agent.image_models import ImageModel


# 1. A pixel task: Catch (a gymnasium env; module-level, so the manager can pickle it).
class Catch(gym.Env):
    """A ball falls one row per step; catch it with the paddle on the bottom row."""

    def __init__(self, rows: int = 10, columns: int = 5) -> None:
        self.rows, self.columns = rows, columns
        self.observation_space = gym.spaces.Box(0, 255, (rows, columns), np.uint8)
        self.action_space = gym.spaces.Discrete(3)  # left, stay, right

    def _frame(self) -> np.ndarray:
        frame = np.zeros((self.rows, self.columns), np.uint8)
        frame[self.ball_row, self.ball_column] = 255
        frame[self.rows - 1, self.paddle] = 255
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball_row, self.ball_column = 0, int(self.np_random.integers(self.columns))
        self.paddle = self.columns // 2
        return self._frame(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.columns - 1))
        self.ball_row += 1
        landed = self.ball_row == self.rows - 1
        reward = (1.0 if self.paddle == self.ball_column else -1.0) if landed else 0.0
        return self._frame(), reward, landed, False, {}


# 2. The user's network: an ImageModel subclass (module-level, so it pickles too).
class SmallConv(ImageModel):
    """Two small convolutions; `c` is (batch, H, W, ch), or (batch, time, H, W, ch) with
    an LSTM, in [0, 1]."""

    autograph = False  # Keras layers only: the learner traces its update in half the time

    def create_image_model(self, c, enable_lstm):
        wrap = keras.layers.TimeDistributed if enable_lstm else (lambda layer: layer)
        c = wrap(keras.layers.Conv2D(16, 3, padding="same", activation="relu"))(c)
        c = wrap(keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"))(c)
        return wrap(keras.layers.Flatten())(c)  # (batch, dim) or (batch, time, dim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nb-steps", type=int, default=15_000, help="env steps in all")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 3. Configuration: one 10x5 grayscale frame per input, a small LSTM; an episode is
    #    9 steps, so sequences of 2 burn-in + 8 trained + 2 look-ahead steps.
    config = R2D2Config(
        input_shape=(10, 5),
        nb_actions=3,
        input_type=InputType.GRAY_2ch,
        lstm_units=32,
        dense_units=32,
        burnin=2,
        input_length=8,
        multisteps=2,
        sequence_period=4,
        gamma=0.95,
        batch_size=32,
        memory_capacity=2_000,
        memory_warmup=64,
        learning_rate=1e-3,
        target_update_interval=200,
        epsilon_start=1.0,
        epsilon_anneal_steps=3_000,
        epsilon=0.05,
        actor_sync_interval=50,
        seed=args.seed,
    )

    # 4. Train with the manager: the actors and the learner build SmallConv themselves.
    env_factory = functools.partial(Catch)
    with R2D2Manager(env_factory, config, actor_num=args.actors, image_model=SmallConv()) as m:
        result = m.train(nb_steps=args.nb_steps, max_seconds=args.max_seconds)
        agent = m.create_test_agent()
    print(
        f"stopped by {result.stop_reason}: {result.env_steps} env steps, "
        f"{result.learner_updates} learner updates in {result.elapsed_seconds:.1f} s"
    )

    # 5. Greedy test: a perfect agent catches every ball (+1 a game); random play is -0.6.
    history = agent.test(Catch(), nb_episodes=args.eval_episodes, visualize=False, verbose=0)
    print(
        f"greedy mean return over {args.eval_episodes} games: "
        f"{np.mean(history.history['episode_reward']):.2f}"
    )


if __name__ == "__main__":
    main()
