"""An env that writes every observation into one reused buffer (common in vectorised and
C-backed envs) must give the same Q-values and the same stored sequences as one that
returns fresh arrays: the actor copies each frame on entry."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.config import R2D2Config
from r2d2_agent.networks import weight_layout
from r2d2_agent.roles import R2D2Builder
from r2d2_agent.testing import SequenceRecorder


class BufferReusingEnv(gym.Wrapper):
    """Returns the same array object on every reset and step, overwritten in place."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._buffer = np.zeros(env.observation_space.shape, env.observation_space.dtype)

    def _into_buffer(self, observation: np.ndarray) -> np.ndarray:
        self._buffer[...] = observation
        return self._buffer

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return self._into_buffer(observation), info

    def step(self, action):
        observation, *rest = self.env.step(action)
        return (self._into_buffer(observation), *rest)


def play(env: gym.Env, config: R2D2Config, steps: int = 30) -> tuple[list, list]:
    """Greedy steps from a fixed seed; returns the Q-values and the stored sequences."""
    builder = R2D2Builder(config)
    policy = builder.make_policy()
    rng = np.random.default_rng(0)
    policy.set_weights([rng.normal(0, 0.5, shape) for _, shape in weight_layout(config)])
    recorder = SequenceRecorder(config.input_sequence)
    actor = builder.make_actor(policy, builder.make_adder(recorder), 0.0, 0)
    observation, _ = env.reset(seed=0)
    actor.observe_first(observation)
    q_values = []
    for _ in range(steps):
        q_values.append(actor.q_values())
        action = actor.select_action()
        observation, reward, terminated, truncated, _ = env.step(action)
        actor.observe(action, float(reward), observation, terminated, truncated)
        if terminated or truncated:
            break
    return q_values, recorder.sequences


@pytest.mark.parametrize("lstm_units", [8, 0], ids=["lstm", "no_lstm"])
def test_reused_observation_buffer_gives_the_same_q_values(make_config, lstm_units):
    config = make_config(input_sequence=3, lstm_units=lstm_units)
    fresh_q, _ = play(gym.make("CartPole-v1"), config)
    reused_q, _ = play(BufferReusingEnv(gym.make("CartPole-v1")), config)
    np.testing.assert_allclose(reused_q, fresh_q)


@pytest.mark.parametrize("lstm_units", [8, 0], ids=["lstm", "no_lstm"])
def test_reused_observation_buffer_gives_the_same_stored_sequences(make_config, lstm_units):
    config = make_config(input_sequence=3, lstm_units=lstm_units)
    _, fresh = play(gym.make("CartPole-v1"), config)
    _, reused = play(BufferReusingEnv(gym.make("CartPole-v1")), config)
    assert len(fresh) == len(reused) > 0
    for a, b in zip(fresh, reused, strict=True):
        np.testing.assert_array_equal(a["obs"], b["obs"])
