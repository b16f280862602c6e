"""A user's own loop with `R2D2Agent.forward`/`backward`: how a time limit is reported.

A truncated episode bootstraps from its last observation, so `backward(truncated=True)`
needs `next_observation` while training; without it the cut episode would bootstrap from
the next episode's first observation (what the next `forward` gets).
"""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.replay import stack_frames

NO_LEARNING = {"train_interval": 10**6}  # no learner update within these tests


@pytest.fixture(scope="module")
def agent(make_config) -> R2D2Agent:
    agent = R2D2Agent(make_config(**NO_LEARNING))
    agent.compile()
    return agent


def fresh(agent: R2D2Agent, training: bool) -> R2D2Agent:
    agent.training = training
    agent.reset_states()
    return agent


def test_truncation_without_next_observation_while_training_raises_naming_it(agent):
    agent = fresh(agent, training=True)
    agent.forward(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="next_observation"):
        agent.backward(1.0, terminal=False, truncated=True)


def test_the_refused_truncation_leaves_the_transition_open(agent):
    agent = fresh(agent, training=True)
    agent.forward(np.zeros(4, np.float32))
    with pytest.raises(ValueError):
        agent.backward(1.0, terminal=False, truncated=True)
    agent.backward(1.0, terminal=False, truncated=True, next_observation=np.ones(4, np.float32))


def test_truncation_with_next_observation_bootstraps_from_it(make_config):
    agent = R2D2Agent(make_config(**NO_LEARNING))  # its own, so replay holds one sequence
    agent.compile()
    agent = fresh(agent, training=True)
    agent.forward(np.zeros(4, np.float32))
    last = np.full(4, 7.0, np.float32)
    agent.backward(1.0, terminal=False, truncated=True, next_observation=last)
    assert len(agent.learner.replay) == 1
    _, batch, _ = agent.learner.replay.sample(1)
    b = agent.config.burnin
    assert batch["bootstrap_discount"][0, 0] == pytest.approx(agent.config.gamma)
    obs = stack_frames(batch["frames"][0], batch["obs_mask"][0], agent.config.input_sequence)
    bootstrap_obs = obs[b + batch["bootstrap_index"][0, 0]]
    np.testing.assert_array_equal(bootstrap_obs[-1], last)


def test_termination_without_next_observation_is_allowed(agent):
    agent = fresh(agent, training=True)
    agent.forward(np.zeros(4, np.float32))
    agent.backward(1.0, terminal=True)
    agent.forward(np.ones(4, np.float32))  # the next episode's first observation


def test_truncation_without_next_observation_is_allowed_when_not_training(agent):
    agent = fresh(agent, training=False)
    agent.forward(np.zeros(4, np.float32))
    agent.backward(1.0, terminal=False, truncated=True)
