"""The previous action and reward as LSTM inputs (`enable_prev_action_reward`): the same
inputs reach the Keras net, the numpy forward pass, the actor's policy and the learner's
sequences."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.networks import KerasPolicy, NumpyNetwork, weight_layout
from r2d2_agent.networks.keras_net import MAX_STATIC_UNROLL, R2D2Network
from r2d2_agent.roles import R2D2Actor, R2D2Builder
from r2d2_agent.testing import SequenceRecorder

WITH_PREV = {"enable_prev_action_reward": True, "nb_actions": 2}


@pytest.fixture(scope="module")
def network(make_config):
    return R2D2Network(make_config(**WITH_PREV))


def random_inputs(steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(2, steps, 1, 4)).astype(np.float32)
    actions = rng.integers(-1, 2, (2, steps)).astype(np.int32)
    rewards = rng.normal(size=(2, steps)).astype(np.float32)
    return obs, actions, rewards


def zero_state(units: int = 8):
    zeros = np.zeros((2, units), np.float32)
    return zeros, zeros


def test_it_needs_an_lstm(make_config):
    with pytest.raises(ValueError, match="enable_prev_action_reward=True needs an LSTM"):
        make_config(enable_prev_action_reward=True, lstm_units=0)


def test_the_lstm_input_grows_by_the_actions_and_the_reward(make_config, network):
    config = make_config(**WITH_PREV)
    keras_layout = [tuple(w.shape) for w in network.get_weights()]
    assert [shape for _, shape in weight_layout(config)] == keras_layout
    assert keras_layout[2] == (config.dense_units + config.nb_actions + 1, 4 * config.lstm_units)


def test_the_previous_action_changes_the_q_values(network):
    obs, actions, rewards = random_inputs(3)
    q_a, _ = network.unroll(obs, zero_state(), prev_action=actions, prev_reward=rewards)
    q_b, _ = network.unroll(obs, zero_state(), prev_action=1 - actions, prev_reward=rewards)
    assert not np.allclose(q_a.numpy(), q_b.numpy())


def test_the_previous_reward_changes_the_q_values(network):
    obs, actions, rewards = random_inputs(3)
    q_a, _ = network.unroll(obs, zero_state(), prev_action=actions, prev_reward=rewards)
    q_b, _ = network.unroll(obs, zero_state(), prev_action=actions, prev_reward=rewards + 1)
    assert not np.allclose(q_a.numpy(), q_b.numpy())


def test_unrolling_without_them_raises(network):
    obs, _, _ = random_inputs(3)
    with pytest.raises(ValueError, match="prev_action and prev_reward"):
        network.unroll(obs, zero_state())


def test_numpy_steps_equal_the_keras_unroll(make_config, network):
    obs, actions, rewards = random_inputs(5, seed=1)
    q_keras, _ = network.unroll(obs, zero_state(), prev_action=actions, prev_reward=rewards)
    numpy_net = NumpyNetwork(make_config(**WITH_PREV), network.get_weights())
    state = np.zeros((2, 2, 8), np.float32)
    for t in range(5):
        q, state = numpy_net.step(obs[:, t], state, actions[:, t], rewards[:, t])
        np.testing.assert_allclose(q, q_keras.numpy()[:, t], rtol=1e-4, atol=1e-5)


def test_the_long_sequence_path_equals_the_in_graph_unroll(network):
    steps = MAX_STATIC_UNROLL + 1  # the Keras LSTM layer's loop, not the in-graph unroll
    obs, actions, rewards = random_inputs(steps, seed=2)
    q_long, _ = network.unroll(obs, zero_state(), prev_action=actions, prev_reward=rewards)
    q_short, _ = network.unroll(
        obs[:, :5], zero_state(), prev_action=actions[:, :5], prev_reward=rewards[:, :5]
    )
    np.testing.assert_allclose(q_long.numpy()[:, :5], q_short.numpy(), rtol=1e-4, atol=1e-5)


def test_the_keras_policy_equals_the_numpy_policy(make_config, network):
    config = make_config(**WITH_PREV)
    keras_policy = KerasPolicy(config)
    keras_policy.set_weights(network.get_weights())
    numpy_policy = NumpyNetwork(config, network.get_weights())
    obs, actions, rewards = random_inputs(1, seed=3)
    state = np.zeros((2, 2, 8), np.float32)
    args = (obs[:, 0], state, actions[:, 0], rewards[:, 0])
    np.testing.assert_allclose(keras_policy.step(*args)[0], numpy_policy.step(*args)[0], rtol=1e-4)


class PrevRecordingPolicy:
    """Records the previous action and reward it is given."""

    def __init__(self):
        self.seen: list[tuple[int, float]] = []

    def step(self, obs, state, prev_action=None, prev_reward=None):
        self.seen.append((int(prev_action[0]), float(prev_reward[0])))
        return np.array([[0.0, 1.0]]), state

    def set_weights(self, weights):
        pass


def test_the_actor_passes_the_previous_action_and_reward(make_config):
    policy = PrevRecordingPolicy()
    actor = R2D2Actor(make_config(**WITH_PREV), policy, None, epsilon=0.0)
    actor.observe_first(np.zeros(4))
    actor.observe(actor.select_action(), 0.5, np.ones(4), False, False)
    actor.observe(actor.select_action(), 2.0, np.ones(4), False, False)
    actor.select_action()
    actor.observe_first(np.zeros(4))  # a new episode starts with none
    actor.select_action()
    assert policy.seen == [(-1, 0.0), (1, 0.5), (1, 2.0), (-1, 0.0)]


def test_sequences_carry_each_observations_previous_action_and_reward(make_config):
    config = make_config(**WITH_PREV, burnin=2, input_length=3, multisteps=1, sequence_period=2)
    recorder = SequenceRecorder()
    builder = R2D2Builder(config)
    adder = builder.make_adder(recorder)
    adder.add_first(np.zeros(4))
    for t in range(6):  # a_t = t % 2, r_t = 10 t; terminated after 6 steps
        q = np.array([0.0, 1.0])
        adder.add(t % 2, 10.0 * t, np.full(4, t + 1.0), t == 5, False, np.zeros((2, 8)), q)
    # window q = 2 covers observations s_0 .. s_5 (burn-in 2, 3 trained, 1 look-ahead)
    second = recorder.sequences[1]
    np.testing.assert_array_equal(second["prev_actions"], [-1, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(second["prev_rewards"], [0, 0, 10, 20, 30, 40])
    # window q = 4: s_2 .. s_7, padded after s_6
    third = recorder.sequences[2]
    np.testing.assert_array_equal(third["prev_actions"], [1, 0, 1, 0, 1, -1])
    np.testing.assert_array_equal(third["prev_rewards"], [10, 20, 30, 40, 50, 0])


def test_the_agent_trains_with_them(make_config, cartpole):
    agent = R2D2Agent(make_config(**WITH_PREV, memory_warmup=4, train_interval=4))
    agent.compile()
    agent.fit(cartpole, nb_steps=120, verbose=0)
    assert agent.learner.updates > 0 and np.isfinite(agent.last_metrics[0])
