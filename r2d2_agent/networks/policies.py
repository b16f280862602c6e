"""Acting policies: a one-step Q-network with carried recurrent state, numpy in and out.

Two implementations run the same weights: `NumpyNetwork` (value inputs; no TensorFlow, so
actor processes that use it never load TensorFlow) and `KerasPolicy` (any network, through
a compiled `tf.function`). `r2d2_agent.roles.builder.R2D2Builder.make_policy` picks one.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.image_models import ImageModel

__all__ = ["KerasPolicy", "Policy"]


class Policy(Protocol):
    """One-step Q-network with carried state, numpy in and numpy out."""

    reward_scale: float
    """What rewards are divided by, from the weights' reward statistics
    (`R2D2Config.normalize_rewards`; 1.0 without)."""

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray,
        prev_action: np.ndarray | None = None,
        prev_reward: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Runs one time step for a batch.

        Args:
            obs: `(batch, input_sequence, *frame)` stacked frames.
            state: `(batch, 2, lstm_units)` recurrent state (ignored without LSTM).
            prev_action: `(batch,)` previous actions (-1: none), with
                `enable_prev_action_reward` (the actor passes them only then).
            prev_reward: `(batch,)` previous rewards, likewise.

        Returns:
            `(q, next_state)`: Q-values `(batch, nb_actions)` and the next state.
        """
        ...

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Sets the network weights, in Keras `get_weights()` order."""
        ...


class KerasPolicy:
    """`Policy` running the Keras model through a compiled `tf.function`.

    Args:
        config: The agent's configuration.
        image_model: Encoder for image inputs (`DQNImageModel` when None).
    """

    def __init__(self, config: R2D2Config, image_model: ImageModel | None = None) -> None:
        from r2d2_agent.compat import tf
        from r2d2_agent.networks.keras_net import R2D2Network

        self.config = config
        self.network = R2D2Network(config, image_model, name="actor")
        self.reward_scale = self.network.reward_scale
        """See `Policy.reward_scale`."""
        spec = [
            tf.TensorSpec((None, *config.network_input_shape), tf.float32),
            tf.TensorSpec((None, 2, config.lstm_units), tf.float32),
            tf.TensorSpec((None,), tf.int32),
            tf.TensorSpec((None,), tf.float32),
        ]

        def _step(obs: Any, state: Any, prev_action: Any, prev_reward: Any) -> tuple[Any, Any]:
            q, (h, c) = self.network.unroll(
                obs[:, None],
                (state[:, 0], state[:, 1]),
                prev_action=prev_action[:, None],
                prev_reward=prev_reward[:, None],
            )
            return q[:, 0], tf.stack([h, c], axis=1)

        # AutoGraph only for an image model that asks for it, as in the learner's update:
        # converting writes a /tmp/__autograph_generated_file*.py per converted function,
        # which a killed actor leaves behind.
        self._step = tf.function(
            _step, input_signature=spec, autograph=self.network.needs_autograph
        )

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray,
        prev_action: np.ndarray | None = None,
        prev_reward: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """See `Policy.step`."""
        batch = len(obs)
        if prev_action is None:
            prev_action = np.full(batch, -1, np.int32)
        if prev_reward is None:
            prev_reward = np.zeros(batch, np.float32)
        q, state = self._step(
            np.asarray(obs, np.float32),
            np.asarray(state, np.float32),
            np.asarray(prev_action, np.int32).reshape(batch),
            np.asarray(prev_reward, np.float32).reshape(batch),
        )
        return q.numpy(), state.numpy()

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """See `Policy.set_weights`."""
        self.network.set_weights(weights)
        self.reward_scale = self.network.reward_scale
