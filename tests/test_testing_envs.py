"""Tests of `r2d2_agent.testing` (`r2d2_agent.envs.masked_cartpole`): the partially
observable MaskedCartPole."""

from __future__ import annotations

import functools
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.testing import MASKED_CARTPOLE_ID, MaskedCartPole, make_masked_cartpole


@pytest.fixture
def masked():
    env = make_masked_cartpole()
    yield env
    env.close()


def test_make_masked_cartpole_makes_a_masked_cartpole(masked):
    assert isinstance(masked, MaskedCartPole)


def test_observation_space_is_a_box_of_two_values(masked):
    space = masked.observation_space
    assert isinstance(space, gym.spaces.Box) and space.shape == (2,)


def test_observation_space_keeps_the_bounds_of_position_and_angle(masked):
    space, full = masked.observation_space, masked.env.observation_space
    np.testing.assert_array_equal(space.low, full.low[[0, 2]])
    np.testing.assert_array_equal(space.high, full.high[[0, 2]])


def test_reset_observation_belongs_to_the_observation_space(masked):
    space = masked.observation_space
    obs, _ = masked.reset(seed=0)
    assert obs.shape == (2,) and obs.dtype == space.dtype and space.contains(obs)


def test_values_match_unmasked_indices_0_and_2(masked, cartpole):
    full = cartpole
    m_obs, _ = masked.reset(seed=5)
    f_obs, _ = full.reset(seed=5)
    np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
    for action in [0, 1, 1, 0, 1, 1, 1]:
        m_obs, m_r, m_term, m_trunc, _ = masked.step(action)
        f_obs, f_r, f_term, f_trunc, _ = full.step(action)
        np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
        assert (m_r, m_term, m_trunc) == (f_r, f_term, f_trunc)


def test_registered_id_has_the_reward_threshold_475():
    assert gym.spec(MASKED_CARTPOLE_ID).reward_threshold == 475


@pytest.fixture
def registered():
    env = gym.make(MASKED_CARTPOLE_ID, max_episode_steps=3)
    yield env
    env.close()


def test_registered_id_makes_a_masked_cartpole(registered):
    assert isinstance(registered.unwrapped, gym.envs.classic_control.CartPoleEnv)
    assert registered.observation_space.shape == (2,)


def test_registered_id_takes_max_episode_steps(registered):
    registered.reset(seed=0)
    truncated = [registered.step(i % 2)[3] for i in range(3)]
    assert truncated == [False, False, True]


def test_registering_again_is_a_silent_no_op():
    import r2d2_agent.testing as testing

    spec = gym.spec(MASKED_CARTPOLE_ID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        testing.register_envs()  # guarded: no re-registration warning
    assert gym.spec(MASKED_CARTPOLE_ID) is spec


def test_partial_of_the_factory_pickles_and_makes_the_env():
    factory = pickle.loads(pickle.dumps(functools.partial(make_masked_cartpole)))
    env = factory()
    assert env.observation_space.shape == (2,)
    env.close()


def test_factory_pickles_by_reference():
    assert pickle.loads(pickle.dumps(make_masked_cartpole)) is make_masked_cartpole


def test_rejects_non_cartpole():
    pendulum = gym.make("Pendulum-v1")
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        MaskedCartPole(pendulum)
    pendulum.close()
