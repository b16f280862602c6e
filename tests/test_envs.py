"""Tests for r2d2_agent.envs: Gymnasium environments behind keras-rl's Env API."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from r2d2_agent.compat import rl_core
from r2d2_agent.envs import GymnasiumEnv, as_keras_rl_env, check_env_spaces


@pytest.fixture
def cartpole():
    env = GymnasiumEnv(gym.make("CartPole-v1"), seed=0)
    yield env
    env.close()


def test_reset_and_step_shapes(cartpole):
    assert isinstance(cartpole, rl_core.Env)
    assert cartpole.observation_shape == (4,) and cartpole.nb_actions == 2
    assert cartpole.action_space == spaces.Discrete(2)
    assert cartpole.observation_space.shape == (4,)
    assert cartpole.unwrapped is cartpole.env.unwrapped
    obs = cartpole.reset()
    assert isinstance(obs, np.ndarray) and obs.shape == (4,)
    obs, reward, done, info = cartpole.step(np.int64(1))
    assert obs.shape == (4,)
    assert isinstance(reward, float) and reward == 1.0
    assert done is False
    assert info["terminated"] is False and info["truncated"] is False


def test_truncation_is_not_termination():
    env = GymnasiumEnv(gym.make("CartPole-v1", max_episode_steps=5), seed=0)
    env.reset()
    for t, action in enumerate([0, 1, 0, 1, 0]):
        _, _, done, info = env.step(action)
        assert done == (t == 4)
    assert info["truncated"] is True and info["terminated"] is False
    env.close()


def test_termination_is_not_truncation(cartpole):
    cartpole.reset()
    for _ in range(100):  # always pushing right makes the pole fall in ~10 steps
        _, _, done, info = cartpole.step(1)
        if done:
            break
    assert done
    assert info["terminated"] is True and info["truncated"] is False


def test_seed_reproducibility():
    a = GymnasiumEnv(gym.make("CartPole-v1"), seed=42)
    b = GymnasiumEnv(gym.make("CartPole-v1"), seed=42)
    c = GymnasiumEnv(gym.make("CartPole-v1"), seed=43)
    first = a.reset()
    np.testing.assert_array_equal(first, b.reset())
    assert not np.array_equal(first, c.reset())
    # The seed applies to the first reset only; seed() re-arms it for the next one.
    assert not np.array_equal(first, a.reset())
    assert a.seed(42) == [42]
    np.testing.assert_array_equal(first, a.reset())
    for env in (a, b, c):
        env.close()


class _InfoWrapper(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "custom": 7}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "at_reset": True}


def test_info_keeps_env_keys():
    env = GymnasiumEnv(_InfoWrapper(gym.make("CartPole-v1")), seed=1)
    env.reset()
    assert env.reset_info == {"at_reset": True}
    _, _, _, info = env.step(0)
    assert info == {"custom": 7, "terminated": False, "truncated": False}
    env.close()


def test_continuous_action_space_rejected():
    pendulum = gym.make("Pendulum-v1")
    with pytest.raises(ValueError, match=r"continuous action space Box\(") as excinfo:
        GymnasiumEnv(pendulum)
    assert "gymnasium.spaces.Discrete" in str(excinfo.value)
    with pytest.raises(ValueError, match="continuous action space Box"):
        check_env_spaces(pendulum.observation_space, pendulum.action_space)
    pendulum.close()


def test_check_env_spaces():
    box = spaces.Box(-1.0, 1.0, (3, 2))
    assert check_env_spaces(box, spaces.Discrete(5)) == ((3, 2), 5)
    with pytest.raises(ValueError, match=r"action space MultiDiscrete"):
        check_env_spaces(box, spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ValueError, match="starts at 1"):
        check_env_spaces(box, spaces.Discrete(3, start=1))
    with pytest.raises(ValueError, match=r"observation space Discrete\(4\).*ObservationWrapper"):
        check_env_spaces(spaces.Discrete(4), spaces.Discrete(2))
    with pytest.raises(ValueError, match="scalar"):
        check_env_spaces(spaces.Box(-1.0, 1.0, ()), spaces.Discrete(2))


def test_as_keras_rl_env_and_close():
    raw = gym.make("CartPole-v1")
    env = as_keras_rl_env(raw, seed=3)
    assert isinstance(env, GymnasiumEnv) and env.env is raw
    assert as_keras_rl_env(env) is env
    with pytest.raises(TypeError):
        as_keras_rl_env("CartPole-v1")
    env.close()
    env.close()  # idempotent
