"""Tests of `r2d2_agent.envs`: Gymnasium environments behind keras-rl's Env API
(`GymnasiumEnv`, `as_keras_rl_env`) and the checks of their spaces (`check_env_spaces`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from r2d2_agent.compat import rl_core
from r2d2_agent.envs import GymnasiumEnv, as_keras_rl_env, check_env_spaces
from r2d2_agent.envs.checks import check_env_reset


@pytest.fixture
def env(cartpole):
    """CartPole-v1 behind `GymnasiumEnv`, seeded with 0."""
    wrapped = GymnasiumEnv(cartpole, seed=0)
    yield wrapped
    wrapped.close()


@pytest.fixture
def seeded(make_cartpole):
    """Factory: a `GymnasiumEnv` of a new CartPole-v1 with `seed`."""
    return lambda seed: GymnasiumEnv(make_cartpole(), seed=seed)


# ------------------------------------------------------------------ the Env API -----
def test_gymnasium_env_is_a_keras_rl_env(env):
    assert isinstance(env, rl_core.Env)


def test_gymnasium_env_reports_observation_shape_and_action_count(env):
    assert env.observation_shape == (4,) and env.nb_actions == 2


def test_gymnasium_env_exposes_the_spaces_of_the_env(env):
    assert env.action_space == spaces.Discrete(2)
    assert env.observation_space.shape == (4,)


def test_gymnasium_env_unwrapped_is_the_gymnasium_unwrapped_env(env):
    assert env.unwrapped is env.env.unwrapped


def test_reset_returns_the_observation_alone(env):
    obs = env.reset()
    assert isinstance(obs, np.ndarray) and obs.shape == (4,)


def test_step_returns_observation_float_reward_done_and_info(env):
    env.reset()
    obs, reward, done, info = env.step(np.int64(1))
    assert obs.shape == (4,)
    assert isinstance(reward, float) and reward == 1.0
    assert done is False
    assert info["terminated"] is False and info["truncated"] is False


def test_truncation_is_not_termination(make_cartpole):
    env = GymnasiumEnv(make_cartpole(max_episode_steps=5), seed=0)
    env.reset()
    for t, action in enumerate([0, 1, 0, 1, 0]):
        _, _, done, info = env.step(action)
        assert done == (t == 4)
    assert info["truncated"] is True and info["terminated"] is False


def test_termination_is_not_truncation(env):
    env.reset()
    for _ in range(100):  # always pushing right makes the pole fall in ~10 steps
        _, _, done, info = env.step(1)
        if done:
            break
    assert done
    assert info["terminated"] is True and info["truncated"] is False


# ------------------------------------------------------------------ seeding ---------
def test_same_seed_gives_the_same_first_observation(seeded):
    np.testing.assert_array_equal(seeded(42).reset(), seeded(42).reset())


def test_different_seeds_give_different_first_observations(seeded):
    assert not np.array_equal(seeded(42).reset(), seeded(43).reset())


def test_seed_applies_to_the_first_reset_only(seeded):
    env = seeded(42)
    first = env.reset()
    assert not np.array_equal(first, env.reset())


def test_seed_method_rearms_the_seed_for_the_next_reset(seeded):
    env = seeded(42)
    first = env.reset()
    env.reset()
    assert env.seed(42) == [42]
    np.testing.assert_array_equal(first, env.reset())


# ------------------------------------------------------------------ info ------------
class _InfoWrapper(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "custom": 7}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "at_reset": True}


@pytest.fixture
def info_env(cartpole):
    env = GymnasiumEnv(_InfoWrapper(cartpole), seed=1)
    env.reset()
    yield env
    env.close()


def test_reset_info_is_kept(info_env):
    assert info_env.reset_info == {"at_reset": True}


def test_step_info_keeps_env_keys_next_to_the_flags(info_env):
    _, _, _, info = info_env.step(0)
    assert info == {"custom": 7, "terminated": False, "truncated": False}


# ------------------------------------------------------------------ space checks ----
@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env
    env.close()


def test_gymnasium_env_rejects_a_continuous_action_space(pendulum):
    with pytest.raises(ValueError, match=r"continuous action space Box\(") as excinfo:
        GymnasiumEnv(pendulum)
    assert "gymnasium.spaces.Discrete" in str(excinfo.value)


def test_check_env_spaces_rejects_a_continuous_action_space(pendulum):
    with pytest.raises(ValueError, match="continuous action space Box"):
        check_env_spaces(pendulum.observation_space, pendulum.action_space)


def test_check_env_spaces_returns_observation_shape_and_action_count():
    assert check_env_spaces(spaces.Box(-1.0, 1.0, (3, 2)), spaces.Discrete(5)) == ((3, 2), 5)


BOX = spaces.Box(-1.0, 1.0, (3, 2))


@pytest.mark.parametrize(
    ("observation_space", "action_space", "message"),
    [
        (BOX, spaces.MultiDiscrete([2, 2]), r"action space MultiDiscrete"),
        (BOX, spaces.Discrete(3, start=1), "starts at 1"),
        (
            spaces.Discrete(4),
            spaces.Discrete(2),
            r"observation space Discrete\(4\).*ObservationWrapper",
        ),
        (spaces.Box(-1.0, 1.0, ()), spaces.Discrete(2), "scalar"),
    ],
    ids=["multi_discrete_actions", "actions_not_from_0", "discrete_observations", "scalar_box"],
)
def test_check_env_spaces_rejects_unsupported_spaces(observation_space, action_space, message):
    with pytest.raises(ValueError, match=message):
        check_env_spaces(observation_space, action_space)


# ------------------------------------------------------------------ as_keras_rl_env -
def test_as_keras_rl_env_wraps_a_gymnasium_env(cartpole):
    env = as_keras_rl_env(cartpole, seed=3)
    assert isinstance(env, GymnasiumEnv) and env.env is cartpole


def test_as_keras_rl_env_returns_a_gymnasium_env_wrapper_unchanged(env):
    assert as_keras_rl_env(env) is env


def test_as_keras_rl_env_rejects_what_is_not_an_env():
    with pytest.raises(TypeError):
        as_keras_rl_env("CartPole-v1")


def test_gymnasium_env_close_is_idempotent(cartpole):
    env = as_keras_rl_env(cartpole, seed=3)
    env.close()
    env.close()


# ----------------------------------------------------- pre-flight reset check --------
class _ResetRaises(gym.Wrapper):
    def reset(self, **kwargs):
        raise KeyError("no such level")


class _ResetReturnsObservationOnly(gym.Wrapper):
    def reset(self, **kwargs):
        return self.env.reset(**kwargs)[0]  # the old gym API


class _ResetReturnsWrongShape(gym.Wrapper):
    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation[:2], info


def test_check_env_reset_passes_a_gymnasium_env(cartpole):
    check_env_reset(cartpole, seed=0)


def test_check_env_reset_reports_an_env_failing_in_reset_with_its_error(cartpole):
    with pytest.raises(ValueError, match=r"reset\(\) failed: KeyError: 'no such level'") as info:
        check_env_reset(_ResetRaises(cartpole))
    assert isinstance(info.value.__cause__, KeyError)


def test_check_env_reset_refuses_the_old_gym_reset(cartpole):
    with pytest.raises(ValueError, match=r"\(observation, info\)"):
        check_env_reset(_ResetReturnsObservationOnly(cartpole))


def test_check_env_reset_refuses_an_observation_of_another_shape(cartpole):
    with pytest.raises(ValueError, match=r"shape \(2,\).*shape \(4,\)"):
        check_env_reset(_ResetReturnsWrongShape(cartpole))
