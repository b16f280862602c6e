"""Tests for r2d2_agent.testing: the partially observable MaskedCartPole."""

from __future__ import annotations

import functools
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.testing import MASKED_CARTPOLE_ID, MaskedCartPole, make_masked_cartpole


def test_observation_space_and_shape():
    env = make_masked_cartpole()
    assert isinstance(env, MaskedCartPole)
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.shape == (2,)
    full = env.env.observation_space
    np.testing.assert_array_equal(space.low, full.low[[0, 2]])
    np.testing.assert_array_equal(space.high, full.high[[0, 2]])
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and obs.dtype == space.dtype and space.contains(obs)
    env.close()


def test_values_match_unmasked_indices_0_and_2():
    masked, full = make_masked_cartpole(), gym.make("CartPole-v1")
    m_obs, _ = masked.reset(seed=5)
    f_obs, _ = full.reset(seed=5)
    np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
    for action in [0, 1, 1, 0, 1, 1, 1]:
        m_obs, m_r, m_term, m_trunc, _ = masked.step(action)
        f_obs, f_r, f_term, f_trunc, _ = full.step(action)
        np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
        assert (m_r, m_term, m_trunc) == (f_r, f_term, f_trunc)
    masked.close()
    full.close()


def test_registered_id_makes_the_masked_env_with_its_threshold():
    spec = gym.spec(MASKED_CARTPOLE_ID)
    assert spec.reward_threshold == 475
    env = gym.make(MASKED_CARTPOLE_ID, max_episode_steps=3)
    assert isinstance(env.unwrapped, gym.envs.classic_control.CartPoleEnv)
    assert env.observation_space.shape == (2,)
    env.reset(seed=0)
    truncated = [env.step(i % 2)[3] for i in range(3)]
    assert truncated == [False, False, True]
    env.close()


def test_registering_again_is_a_silent_no_op():
    import r2d2_agent.testing as testing

    spec = gym.spec(MASKED_CARTPOLE_ID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        testing.register_envs()  # guarded: no re-registration warning
    assert gym.spec(MASKED_CARTPOLE_ID) is spec


def test_factory_pickles():
    factory = pickle.loads(pickle.dumps(functools.partial(make_masked_cartpole)))
    env = factory()
    assert env.observation_space.shape == (2,)
    env.close()
    assert pickle.loads(pickle.dumps(make_masked_cartpole)) is make_masked_cartpole


def test_rejects_non_cartpole():
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        MaskedCartPole(gym.make("Pendulum-v1"))
