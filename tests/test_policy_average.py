"""Tests of `policy_average_updates`: the greedy policy's moving average of the online
weights, kept by the learner and read by everything that plays greedily.

The learners are tiny and without LSTM (`lstm_units=0`: the update traces in a fraction of
the LSTM's time); the average is checked against a numpy recomputation from the online
weights after each update, and the updates themselves against a learner without it.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from test_learner import as_record, make_learner, make_sequence, stack, weights_equal

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import EvaluationCallback
from r2d2_agent.checkpoints import read_checkpoint, write_checkpoint
from r2d2_agent.networks.weights_io import split_published
from r2d2_agent.roles import R2D2Builder

H = 4  # learner updates the average spans in these tests


@pytest.fixture(scope="module")
def config(make_config):
    """Factory: the tiny CartPole config without LSTM, with 1-step returns."""
    return lambda **changes: make_config(**{"lstm_units": 0, "multisteps": 1, **changes})


def moved_apart(learner):
    """Whether the average and the online weights differ."""
    return not weights_equal(learner.get_policy_weights(), learner.get_weights())


@pytest.fixture(scope="module")
def pair(config):
    """A learner without and one with the average, from the same weights, after the
    same five updates on one batch; the online weights after each update."""
    plain = make_learner(config())
    averaged = make_learner(config(policy_average_updates=H))
    averaged.set_weights(plain.get_weights())
    initial = averaged.get_weights()
    rng = np.random.default_rng(3)
    batch = stack([make_sequence(plain.config, rng) for _ in range(plain.config.batch_size)])
    weights = np.ones(plain.config.batch_size, np.float32)
    history = []
    for _ in range(5):
        plain.learn(batch, weights)
        averaged.learn(batch, weights)
        history.append(averaged.get_weights())
    return SimpleNamespace(plain=plain, averaged=averaged, initial=initial, history=history)


# ----------------------------------------------------------------- the average ------
def test_average_is_the_moving_average_of_the_online_weights_after_each_update(pair):
    expected = pair.initial  # the average starts as a copy of the online weights
    for online in pair.history:
        expected = [
            a + (w - a) * np.float32(1.0 / H) for a, w in zip(expected, online, strict=True)
        ]
    assert weights_equal(pair.averaged.get_policy_weights(), expected, atol=1e-6)
    assert moved_apart(pair.averaged)


def test_policy_averaging_leaves_the_updates_bit_for_bit(pair):
    assert weights_equal(pair.plain.get_weights(), pair.averaged.get_weights())


def test_without_averaging_the_policy_weights_are_the_online_weights(pair):
    plain = pair.plain
    assert plain.average is None
    assert weights_equal(plain.get_policy_weights(), plain.get_weights())
    assert len(plain.get_published_weights()) == len(plain.get_weights())


def test_set_weights_starts_the_average_over_from_them(pair, config):
    learner = make_learner(config(policy_average_updates=H))
    learner.set_weights(pair.averaged.get_weights())
    assert weights_equal(learner.get_policy_weights(), pair.averaged.get_weights())


@pytest.mark.parametrize("updates", [0, H])
def test_learner_takes_an_average_network_exactly_with_policy_average_updates(config, updates):
    from r2d2_agent.networks import R2D2Network
    from r2d2_agent.roles.learner import R2D2Learner

    cfg = config(policy_average_updates=updates)
    builder = R2D2Builder(cfg)
    with pytest.raises(ValueError, match=rf"policy_average_updates > 0 \(it is {updates}\)"):
        R2D2Learner(
            cfg,
            online=R2D2Network(cfg, name="online"),
            target=R2D2Network(cfg, name="target"),
            optimizer=builder.make_optimizer(),
            replay=builder.make_replay(),
            average=R2D2Network(cfg, name="average") if updates == 0 else None,
        )


def test_the_policy_takes_the_online_reward_statistics_without_averaging_them(config):
    learner = make_learner(config(policy_average_updates=H, normalize_rewards=True))
    rng = np.random.default_rng(0)
    for first_frame in (0, 100):  # 4 rewards of square 9 each, merged on the next read
        record = as_record(make_sequence(learner.config, rng), 1.0, first_frame)
        learner.add(replace(record, reward_count=4, reward_sum_square=36.0))
    statistics = [w for w in learner.online.model.weights if not w.trainable]
    assert statistics, "normalize_rewards keeps the statistics as untrained weights"
    names = [w.name for w in learner.online.model.weights]
    policy = dict(zip(names, learner.get_policy_weights(), strict=True))
    online = dict(zip(names, learner.get_weights(), strict=True))
    for variable in statistics:
        np.testing.assert_array_equal(policy[variable.name], online[variable.name])
    assert learner.reward_scale == pytest.approx(3.0)


# ----------------------------------------------------------------- what is published ------
@pytest.mark.parametrize(
    ("averaged", "arrays", "acting", "policy"),
    [
        (False, ["a", "b"], ["a", "b"], ["a", "b"]),
        (True, ["a", "b", "A", "B"], ["a", "b"], ["A", "B"]),
        (True, [], [], []),
    ],
)
def test_split_published_takes_the_online_then_the_policy_weights(averaged, arrays, acting, policy):
    assert split_published(arrays, averaged) == (acting, policy)


def test_published_weights_round_trip_into_another_learner(pair, config):
    learner = pair.averaged
    published = learner.get_published_weights()
    other = make_learner(config(policy_average_updates=H))
    other.set_published_weights(published)
    assert weights_equal(other.get_weights(), learner.get_weights())
    assert weights_equal(other.get_policy_weights(), learner.get_policy_weights())
    with pytest.raises(ValueError, match="publishes"):
        other.set_published_weights(learner.get_weights())


# ----------------------------------------------------------------- files ------
@pytest.fixture
def averaged_learner(pair):
    return pair.averaged


def test_checkpoint_keeps_the_average_and_restore_brings_it_back(
    averaged_learner, config, tmp_path
):
    path = write_checkpoint(tmp_path / "c.h5", averaged_learner.save())
    state = read_checkpoint(path)
    assert weights_equal(state.average_weights, averaged_learner.get_policy_weights())
    other = make_learner(config(policy_average_updates=H))
    other.restore(state)
    assert weights_equal(other.get_weights(), averaged_learner.get_weights())
    assert weights_equal(other.get_policy_weights(), averaged_learner.get_policy_weights())


def test_restore_without_an_average_starts_it_from_the_online_weights(
    averaged_learner, config, tmp_path
):
    plain = make_learner(config())
    plain.set_weights(averaged_learner.get_weights())
    path = write_checkpoint(tmp_path / "c.h5", plain.save())
    assert read_checkpoint(path).average_weights is None
    other = make_learner(config(policy_average_updates=H))
    other.restore(read_checkpoint(path))
    assert weights_equal(other.get_policy_weights(), averaged_learner.get_weights())


def test_load_weights_of_a_checkpoint_loads_its_policy(averaged_learner, config, tmp_path):
    path = write_checkpoint(tmp_path / "c.h5", averaged_learner.save())
    plain = make_learner(config())
    plain.load_weights(path)
    assert weights_equal(plain.get_weights(), averaged_learner.get_policy_weights())


def test_save_weights_writes_the_policy_weights(averaged_learner, config, tmp_path):
    averaged_learner.save_weights(tmp_path / "w.h5")
    plain = make_learner(config())
    plain.load_weights(tmp_path / "w.h5")
    assert weights_equal(plain.get_weights(), averaged_learner.get_policy_weights())


def test_with_weights_replaces_the_average_too(averaged_learner, config):
    fresh = make_learner(config()).get_weights()
    state = averaged_learner.save().with_weights(fresh)
    assert weights_equal(state.average_weights, fresh)
    assert weights_equal(state.policy_weights, fresh)


# ----------------------------------------------------------------- who plays it ------
@pytest.fixture(scope="module")
def averaged_agent(make_config):
    """A single-process agent (no LSTM: quicker to trace), 600 env steps into CartPole."""
    agent = R2D2Agent(make_config(policy_average_updates=H, seed=0, lstm_units=0))
    agent.compile()
    env = gym.make("CartPole-v1")
    agent.fit(env, nb_steps=600, verbose=0)
    env.close()
    assert moved_apart(agent.learner)
    return agent


def _agent_holding(make_config, weights):
    agent = R2D2Agent(make_config(seed=0, lstm_units=0))
    agent.learner.set_weights(weights)
    agent.sync_actor()
    return agent


def test_agent_predicts_with_the_average(averaged_agent, make_config):
    observation = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
    q = averaged_agent.predict(observation).q_values
    learner = averaged_agent.learner
    policy = _agent_holding(make_config, learner.get_policy_weights())
    online = _agent_holding(make_config, learner.get_weights())
    np.testing.assert_array_equal(q, policy.predict(observation).q_values)
    assert not np.array_equal(q, online.predict(observation).q_values)


def test_agent_trains_with_the_online_weights(averaged_agent, make_config):
    observation = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
    online = _agent_holding(make_config, averaged_agent.learner.get_weights())
    averaged_agent.actor.reset_state()
    np.testing.assert_array_equal(
        averaged_agent.actor.q_values(observation), online.actor.q_values(observation)
    )


def test_evaluation_callback_plays_and_keeps_the_average(averaged_agent):
    make_env = functools.partial(gym.make, "CartPole-v1")
    callback = EvaluationCallback(make_env, interval=1, episodes=1, seed=0)
    callback.evaluate(averaged_agent.learner, env_steps=600)
    callback.close()
    assert weights_equal(callback.best_weights, averaged_agent.learner.get_policy_weights())
    assert not weights_equal(callback.best_weights, averaged_agent.learner.get_weights())
