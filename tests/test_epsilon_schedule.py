"""Exploration annealed from `epsilon_start` to the final epsilon (DQN's schedule), in the
single-process agent and in distributed actors alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.distributed.actor_runner import ActorRunner
from r2d2_agent.math import annealed_epsilon
from r2d2_agent.networks import weight_layout
from r2d2_agent.roles import R2D2Builder

RAMP = {"epsilon_start": 1.0, "epsilon_anneal_steps": 100, "epsilon": 0.1}


@pytest.mark.parametrize(("step", "want"), [(0, 1.0), (50, 0.55), (100, 0.1), (10_000, 0.1)])
def test_the_rate_falls_linearly_from_start_to_final(step, want):
    assert annealed_epsilon(1.0, 0.1, 100, step) == pytest.approx(want)


def test_without_a_start_the_rate_is_the_final_one():
    assert annealed_epsilon(None, 0.1, 100, 0) == 0.1


@pytest.mark.parametrize(
    ("field", "value"),
    [("epsilon_start", 1.5), ("epsilon_start", -0.1), ("epsilon_anneal_steps", -1)],
)
def test_bad_ramp_settings_are_refused_naming_them(make_config, field, value):
    with pytest.raises(ValueError, match=field):
        make_config(**{field: value})


@pytest.fixture(scope="module")
def agent(make_config):
    agent = R2D2Agent(make_config(**RAMP, train_interval=10**6))
    agent.compile()
    return agent


def test_the_agent_explores_at_the_start_rate_first(agent):
    assert agent.training_epsilon() == pytest.approx(1.0)


def test_the_agent_anneals_over_its_training_steps(agent):
    agent.fit(gym.make("CartPole-v1"), nb_steps=50, verbose=0)
    assert agent.actor.epsilon == pytest.approx(0.55)
    agent.fit(gym.make("CartPole-v1"), nb_steps=60, verbose=0)
    assert agent.actor.epsilon == pytest.approx(0.1)


class Sink:
    def send(self, items, timeout=None):
        return True

    def close(self):
        pass


class Weights:
    def __init__(self, config):
        rng = np.random.default_rng(0)
        self.weights = [rng.normal(0, 0.3, s).astype(np.float32) for _, s in weight_layout(config)]
        self.version = 0

    def pull_if_newer(self):
        self.version += 1
        return self.weights

    def close(self):
        pass


def test_a_distributed_actor_anneals_to_its_own_final_rate(make_config):
    config = make_config(**RAMP)
    runner = ActorRunner(
        0, R2D2Builder(config), gym.make("CartPole-v1"), Sink(), Weights(config), epsilon=0.2
    )
    assert runner.epsilon == pytest.approx(1.0)
    runner.run(lambda: runner.steps >= 50)
    assert runner.epsilon == pytest.approx(annealed_epsilon(1.0, 0.2, 100, 50))
