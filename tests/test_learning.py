"""Proof that R2D2 learns: fixed seeds, env-step budgets, return thresholds.

Protocol (the same as the peer benchmarks in shared/peers): train in chunks of 2,500 env
steps and evaluate 10 greedy episodes after each; the task is solved when an evaluation's
mean return reaches 475. These tests are `slow` (minutes); `make test` runs them.
"""

import gymnasium as gym
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.envs.memory import RepeatPrevious
from r2d2_agent.presets import cartpole_config, masked_cartpole_config, memory_config
from r2d2_agent.testing import make_masked_cartpole, train_until_solved

pytestmark = pytest.mark.slow

# With the presets (2,500-step evaluations, TensorFlow's default threads) CartPole seed 2
# solves at 7,500 env steps. The masked seed 0 solved at 15,000 (one env) and 7,500 (four)
# on one machine and at 35,000 and 32,500 on another (another CPU rounds differently, and
# a run is one draw of its outcome: benchmarks/RESULTS.md, stop 52); over seeds 0-19 the
# slowest solved at 42,500. The budget covers that: the tests stop once solved, so it
# costs only where a run is slow.
CARTPOLE_BUDGET = 25_000
MASKED_BUDGET = 50_000
WITHOUT_LSTM_BUDGET = 30_000
"""The whole budget of the run without an LSTM (it does not stop at a solve)."""


def _train(config, make_env, budget, stop_when_solved=True):
    agent = R2D2Agent(config)
    agent.compile()
    return train_until_solved(agent, make_env, budget, stop_when_solved=stop_when_solved)


def test_cartpole_is_solved_within_budget():
    result = _train(cartpole_config(seed=2), lambda: gym.make("CartPole-v1"), CARTPOLE_BUDGET)
    assert result["solved_at"] is not None, result["evals"]


def test_masked_cartpole_is_solved_with_lstm():
    result = _train(masked_cartpole_config(seed=0), make_masked_cartpole, MASKED_BUDGET)
    assert result["solved_at"] is not None, result["evals"]


def test_masked_cartpole_is_solved_with_four_envs():
    """Four envs in one actor learn as one does (seed 0 solved at 7,500 env steps of all
    four on one machine, 32,500 on another; with the Ape-X spread instead of the presets'
    equal ε it took 37,500 on the first)."""
    config = masked_cartpole_config(seed=0, envs_per_actor=4)
    result = _train(config, make_masked_cartpole, MASKED_BUDGET)
    assert result["solved_at"] is not None, result["evals"]


def test_masked_cartpole_without_lstm_falls_clearly_short():
    result = _train(
        masked_cartpole_config(seed=0, lstm_units=0),
        make_masked_cartpole,
        WITHOUT_LSTM_BUDGET,
        stop_when_solved=False,
    )
    best = max(mean for _, mean in result["evals"])
    assert best < 200, result["evals"]


def test_recall_three_steps_back_is_solved_with_each_step_scored():
    """Issue 24's recall task (repeat the symbol 3 steps back, ±1/47 a step, chance -0.5)
    with the README's rule for it: γ 0, whose update runs no target network. Seed 0
    solves it at 10,000 env steps in the memory suite; here within 15,000 (mean >= 0.9)."""
    config = memory_config((4,), 4, memory_span=3, each_step_scored=True, seed=0)
    agent = R2D2Agent(config)
    agent.compile()
    result = train_until_solved(agent, lambda: RepeatPrevious(k=3), 15_000, threshold=0.9)
    assert result["solved_at"] is not None, result["evals"]
