"""A numpy forward pass of the value-input R2D2 network, for fast acting.

One-step inference bounds an actor: for a CartPole-sized net an eager Keras call costs
milliseconds and a `tf.function` call about 0.4 ms, while this numpy version costs tens of
microseconds (see benchmarks/RESULTS.md). It runs the same weights as the Keras model built
by `r2d2_agent.networks.keras_net.build_model` for `InputType.VALUES`, without importing TensorFlow,
so actor processes that use it never load TensorFlow at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.math.reward_scale import reward_scale

__all__ = ["NumpyNetwork", "supports_numpy", "weight_layout"]


def supports_numpy(config: R2D2Config) -> bool:
    """Whether `NumpyNetwork` can run this configuration (value inputs only)."""
    return config.input_type is InputType.VALUES


def weight_layout(config: R2D2Config) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the model's weights, in Keras `get_weights()` order.

    Args:
        config: A configuration with `InputType.VALUES`.

    Returns:
        A list of (name, shape); the test suite checks it against the Keras model.
    """
    if not supports_numpy(config):
        raise ValueError(f"no numpy layout for input_type {config.input_type.name}")
    d, a = config.dense_units, config.nb_actions
    layout = [
        ("encoder_dense/kernel", (int(np.prod(config.network_input_shape)), d)),
        ("encoder_dense/bias", (d,)),
    ]
    width = d
    if config.enable_lstm:
        u = config.lstm_units
        lstm_in = d + (a + 1 if config.enable_prev_action_reward else 0)
        layout += [
            ("lstm/kernel", (lstm_in, 4 * u)),
            ("lstm/recurrent_kernel", (u, 4 * u)),
            ("lstm/bias", (4 * u,)),
        ]
        width = u
    if config.enable_dueling:
        layout += [
            ("value_hidden/kernel", (width, d)),
            ("value_hidden/bias", (d,)),
            ("advantage_hidden/kernel", (width, d)),
            ("advantage_hidden/bias", (d,)),
            ("value/kernel", (d, 1)),
            ("value/bias", (1,)),
            ("advantage/kernel", (d, a)),
            ("advantage/bias", (a,)),
        ]
    else:
        layout += [
            ("q_hidden/kernel", (width, d)),
            ("q_hidden/bias", (d,)),
            ("q/kernel", (d, a)),
            ("q/bias", (a,)),
        ]
    if config.normalize_rewards:  # float64 scalars, last (keras_net.RewardStatistics)
        layout += [("reward_statistics/count", ()), ("reward_statistics/mean_square", ())]
    return layout


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # overflow-free logistic


class NumpyNetwork:
    """Batched one-step forward pass with carried LSTM state, in float32 numpy.

    Args:
        config: A configuration with `InputType.VALUES`.
        weights: Optional initial weights in Keras order (see `weight_layout`).
    """

    def __init__(self, config: R2D2Config, weights: Sequence[np.ndarray] | None = None) -> None:
        self.config = config
        self.layout = weight_layout(config)
        self.w: dict[str, np.ndarray] = {}
        self.reward_scale = 1.0
        """What rewards are divided by (`r2d2_agent.math.reward_scale` of the weights'
        reward statistics); 1.0 without `normalize_rewards`."""
        if weights is not None:
            self.set_weights(weights)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        """Sets the weights (Keras order); raises ValueError on a shape mismatch."""
        if len(weights) != len(self.layout):
            raise ValueError(f"expected {len(self.layout)} weight arrays, got {len(weights)}")
        for (name, shape), array in zip(self.layout, weights, strict=True):
            if tuple(array.shape) != shape:
                raise ValueError(f"weight {name}: expected shape {shape}, got {array.shape}")
            dtype = np.float64 if name.startswith("reward_statistics/") else np.float32
            self.w[name] = np.asarray(array, dtype=dtype)
        if self.config.normalize_rewards:
            self.reward_scale = reward_scale(
                float(self.w["reward_statistics/count"]),
                float(self.w["reward_statistics/mean_square"]),
            )

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray | None,
        prev_action: np.ndarray | None = None,
        prev_reward: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One time step for a batch.

        Args:
            obs: (batch, input_sequence, *frame) stacked frames.
            state: (batch, 2, lstm_units) recurrent state (ignored without LSTM).
            prev_action: (batch,) int, the previous action (-1: none); needed with
                `enable_prev_action_reward`.
            prev_reward: (batch,) float, the previous reward; likewise.

        Returns:
            (q, state): Q-values (batch, nb_actions) and the next state.
        """
        w = self.w
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        x = np.maximum(x @ w["encoder_dense/kernel"] + w["encoder_dense/bias"], 0.0)
        if self.config.enable_prev_action_reward:
            actions = np.asarray(prev_action).reshape(len(x))
            one_hot = (actions[:, None] == np.arange(self.config.nb_actions)).astype(np.float32)
            reward = np.asarray(prev_reward, dtype=np.float32).reshape(len(x), 1)
            x = np.concatenate([x, one_hot, reward], axis=-1)
        if self.config.enable_lstm:
            h, c = state[:, 0], state[:, 1]
            z = x @ w["lstm/kernel"] + h @ w["lstm/recurrent_kernel"] + w["lstm/bias"]
            u = z.shape[-1] // 4  # Keras gate order: input, forget, cell, output
            i, f, g, o = z[:, :u], z[:, u : 2 * u], z[:, 2 * u : 3 * u], z[:, 3 * u :]
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            x = _sigmoid(o) * np.tanh(c)
            state = np.concatenate([x, c], axis=-1).reshape(len(x), 2, u)  # np.stack's axis 1
        if self.config.enable_dueling:
            v = np.maximum(x @ w["value_hidden/kernel"] + w["value_hidden/bias"], 0.0)
            v = v @ w["value/kernel"] + w["value/bias"]
            a = np.maximum(x @ w["advantage_hidden/kernel"] + w["advantage_hidden/bias"], 0.0)
            a = a @ w["advantage/kernel"] + w["advantage/bias"]
            # a.mean(axis=-1, keepdims=True), without its Python wrapper
            mean = np.add.reduce(a, axis=-1, keepdims=True)
            q = v + a - np.true_divide(mean, a.shape[-1], out=mean)
        else:
            q = np.maximum(x @ w["q_hidden/kernel"] + w["q_hidden/bias"], 0.0)
            q = q @ w["q/kernel"] + w["q/bias"]
        return q, state
