"""Acting from an explicit recurrent state: `RecurrentState` and `recurrent_step`.

`R2D2Actor` keeps its episode's state inside (LSTM state, frame stack, previous action and
reward) for the episode loops. Where a user predicts step by step, the state is passed in
and returned instead (`R2D2Agent.predict`, as sb3-contrib's `predict(obs, state,
episode_start)`), so a prediction never depends on what an earlier `fit` or `test` left in
the agent. No TensorFlow here (the policy may be the numpy one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.math import inverse_rescale
from r2d2_agent.networks.policies import Policy

__all__ = ["Prediction", "RecurrentState", "q_in_return_units", "recurrent_step"]


def _read_only(array: Any) -> np.ndarray:
    array = np.array(array)  # a copy
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class RecurrentState:
    """What acting carries from one step of an episode to the next: the value
    `R2D2Agent.predict` takes and returns. Treat it as opaque; its arrays are read-only.

    Attributes:
        lstm: (2, lstm_units): the LSTM's h and c after the last step ((2, 0) without LSTM).
        frames: The last step's `input_sequence` frames, oldest first, ending with its
            observation (zero frames stand for those before the episode start).
        action: The action chosen at the last step (the network's previous action with
            `enable_prev_action_reward`).
    """

    lstm: np.ndarray
    frames: tuple[np.ndarray, ...]
    action: int


class Prediction(NamedTuple):
    """What `R2D2Agent.predict` returns; unpacks as `action, q_values, state`.

    Attributes:
        action: The chosen action.
        q_values: Q-values of the observation, (nb_actions,), in return units (h⁻¹
            applied when the config rescales values, times the reward scale when it
            normalizes rewards).
        state: The state to pass with the episode's next observation.
    """

    action: int
    q_values: np.ndarray
    state: RecurrentState


def recurrent_step(
    config: R2D2Config,
    policy: Policy,
    observation: Any,
    state: RecurrentState | None,
    reward: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """One acting step from an explicit state, as `R2D2Actor` steps from its own.

    Args:
        config: The agent's configuration.
        policy: The acting network.
        observation: The new observation.
        state: The state after the previous step of the episode; None starts an episode
            at `observation` (zero LSTM state, zero frames before it, no previous action).
        reward: The reward of the previous step (used with `enable_prev_action_reward`;
            divided by `policy.reward_scale` with `normalize_rewards`, as the actor does).

    Returns:
        (Q-values in network units, shape (nb_actions,); the LSTM state after the step,
        (2, lstm_units), read-only; the step's frames, read-only).
    """
    frame = np.array(observation)  # a copy: envs may reuse one observation buffer
    if state is None:
        previous = [np.zeros_like(frame)] * (config.input_sequence - 1)
        lstm = np.zeros((2, config.state_size), np.float32)
        prev_action, prev_reward = -1, 0.0
    else:
        previous = list(state.frames[1:])
        lstm, prev_action, prev_reward = state.lstm, state.action, float(reward)
        if config.normalize_rewards:
            prev_reward /= policy.reward_scale
    frames = (*previous, frame)
    stacked = np.stack(frames)[None]
    if config.enable_prev_action_reward:
        q, next_lstm = policy.step(
            stacked,
            lstm[None],
            np.array([prev_action], np.int32),
            np.array([prev_reward], np.float32),
        )
    else:
        q, next_lstm = policy.step(stacked, lstm[None])
    return q[0], _read_only(next_lstm[0]), tuple(_read_only(f) for f in frames)


def q_in_return_units(config: R2D2Config, q: np.ndarray, reward_scale: float) -> np.ndarray:
    """Q-values from the network's units to return units: h⁻¹ when the config rescales
    values, then times the reward scale when it normalizes rewards.

    Args:
        config: The agent's configuration.
        q: Q-values as the network computed them.
        reward_scale: The reward scale of the weights that computed them
            (`Policy.reward_scale`).
    """
    q = inverse_rescale(q) if config.enable_rescaling else np.asarray(q)
    return q * reward_scale if config.normalize_rewards else q
