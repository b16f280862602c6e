"""The R2D2 actor: ε-greedy acting with a carried recurrent state, feeding an adder.

The actor does not know where its weights come from or where its sequences go: it
takes weights through `update` and hands transitions to a `SequenceAdder` whose sink
may be a local learner or a queue to a learner process.
"""

from __future__ import annotations

import collections
from typing import Any, Protocol

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.numpy_net import NumpyNetwork, supports_numpy
from r2d2_agent.replay.adder import SequenceAdder


class Policy(Protocol):
    """One-step Q-network with carried state (numpy in, numpy out)."""

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(batch, S, *frame) obs and (batch, 2, units) state -> (batch, A) Q, next state."""

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Sets the network weights (Keras order)."""


class KerasPolicy:
    """`Policy` running the Keras model through a compiled `tf.function`.

    Args:
        config: the agent's configuration.
        image_model: encoder for image inputs.
    """

    def __init__(self, config: R2D2Config, image_model: Any = None) -> None:
        from r2d2_agent.compat import tf
        from r2d2_agent.networks import R2D2Network

        self.config = config
        self.network = R2D2Network(config, image_model, name="actor")
        units = config.lstm_units
        spec = [tf.TensorSpec((None, *config.network_input_shape), tf.float32),
                tf.TensorSpec((None, 2, units), tf.float32)]

        def _step(obs: Any, state: Any) -> tuple[Any, Any]:
            q, (h, c) = self.network.unroll(obs[:, None], (state[:, 0], state[:, 1]))
            return q[:, 0], tf.stack([h, c], axis=1)

        self._step = tf.function(_step, input_signature=spec)

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, state = self._step(np.asarray(obs, np.float32), np.asarray(state, np.float32))
        return q.numpy(), state.numpy()

    def set_weights(self, weights: list[np.ndarray]) -> None:
        self.network.set_weights(weights)


def resolve_use_numpy(config: R2D2Config, image_model: Any = None,
                      use_numpy: bool | None = None) -> bool:
    """Whether to act with the numpy forward pass.

    Args:
        config: the agent's configuration.
        image_model: encoder for image inputs (rules the numpy pass out).
        use_numpy: force (True) or forbid (False) it; None picks it whenever possible.

    Raises:
        ValueError: if it is forced but the network is not a value-input network.
    """
    possible = image_model is None and supports_numpy(config)
    if use_numpy and not possible:
        raise ValueError("use_numpy_policy=True needs InputType.VALUES and no image_model")
    return possible if use_numpy is None else bool(use_numpy)


def make_policy(config: R2D2Config, image_model: Any = None, use_numpy: bool | None = None
                ) -> Policy:
    """The fastest policy for a config: numpy for value inputs, Keras otherwise.

    Args:
        config: the agent's configuration.
        image_model: encoder for image inputs (forces the Keras policy).
        use_numpy: force (True) or forbid (False) the numpy forward pass; None decides.
    """
    if resolve_use_numpy(config, image_model, use_numpy):
        return NumpyNetwork(config)
    return KerasPolicy(config, image_model)


def make_adder(config: R2D2Config, sink: Any, observation_dtype: Any = np.float32
               ) -> SequenceAdder:
    """A `SequenceAdder` shaped by the config that hands sequences to `sink`.

    It lives here, not in `r2d2_agent.agent`, so actor processes that act with the numpy
    policy build their adder without importing TensorFlow.
    """
    return SequenceAdder(
        sink, observation_shape=config.network_input_shape,
        observation_dtype=observation_dtype, state_size=config.state_size,
        burnin=config.burnin, input_length=config.input_length,
        multisteps=config.multisteps, period=config.period, gamma=config.gamma,
        priority_eta=config.priority_eta, rescaling=config.enable_rescaling,
        double_q=config.enable_double_dqn)


class R2D2Actor:
    """Acts in one environment and records what it did.

    Args:
        config: the agent's configuration.
        policy: the Q-network to act with (`make_policy`).
        adder: where transitions go; None for evaluation-only actors.
        epsilon: exploration rate of this actor (e.g. its Ape-X ε_i).
        seed: seed of the actor's exploration randomness.
    """

    def __init__(self, config: R2D2Config, policy: Policy, adder: SequenceAdder | None,
                 epsilon: float, seed: int | None = None) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.config = config
        self.policy = policy
        self.adder = adder
        self.epsilon = float(epsilon)
        self._rng = np.random.default_rng(seed)
        self._frames: collections.deque[np.ndarray] = collections.deque(
            maxlen=config.input_sequence)
        self._state = np.zeros((1, 2, config.state_size), np.float32)
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # (state before, Q) of s_t
        self.episode_started = False

    # Acme-style interface -------------------------------------------------------------

    def observe_first(self, observation: Any) -> None:
        """Starts an episode at its first observation (resets frames and state)."""
        frame = np.asarray(observation)
        self._frames.clear()
        for _ in range(self.config.input_sequence - 1):
            self._frames.append(np.zeros_like(frame))  # zero frames before the episode
        self._frames.append(frame)
        self._state = np.zeros_like(self._state)
        self._last = None
        self.episode_started = True
        if self.adder is not None:
            self.adder.reset()
            self.adder.add_first(self.stacked_observation())

    def select_action(self) -> int:
        """ε-greedy action for the current observation; advances the recurrent state."""
        if not self.episode_started:
            raise RuntimeError("call observe_first(observation) before select_action()")
        q, next_state = self.policy.step(self.stacked_observation()[None], self._state)
        self._last = (self._state[0], q[0])
        self._state = next_state
        if self.epsilon > 0.0 and self._rng.random() < self.epsilon:
            return int(self._rng.integers(self.config.nb_actions))
        return int(np.argmax(q[0]))

    def observe(self, action: int, reward: float, next_observation: Any,
                terminated: bool, truncated: bool) -> None:
        """Records the transition that followed `select_action`."""
        if self._last is None:
            raise RuntimeError("observe() needs a select_action() before it")
        self._frames.append(np.asarray(next_observation))
        state_before, q = self._last
        self._last = None
        if self.adder is not None:
            next_q = None
            if truncated and not terminated:  # bootstrap value for the initial priority
                next_q = self.policy.step(self.stacked_observation()[None], self._state)[0][0]
            self.adder.add(action, float(reward), self.stacked_observation(),
                           bool(terminated), bool(truncated), state_before, q, next_q)
        if terminated or truncated:
            self.episode_started = False

    def update(self, weights: list[np.ndarray]) -> None:
        """Takes new network weights."""
        self.policy.set_weights(weights)

    # Helpers ----------------------------------------------------------------------------

    def stacked_observation(self) -> np.ndarray:
        """The current network input, shape (input_sequence, *frame)."""
        return np.stack(self._frames)

    def q_values(self, observation: Any = None) -> np.ndarray:
        """Q-values (network units) from the current recurrent state, which is not advanced.

        Args:
            observation: a new frame to rate as if it came next (the frame stack is not
                changed); None rates the current observation.
        """
        if observation is None:
            stacked = self.stacked_observation()
        else:
            frame = np.asarray(observation)
            previous = list(self._frames)[1:] if self.episode_started else [
                np.zeros_like(frame)] * (self.config.input_sequence - 1)
            stacked = np.stack([*previous, frame])
        q, _ = self.policy.step(stacked[None], self._state)
        return q[0]

    def reset_state(self) -> None:
        """Forgets the episode: frames, recurrent state and the adder's partial episode."""
        self._frames.clear()
        self._state = np.zeros_like(self._state)
        self._last = None
        self.episode_started = False
        if self.adder is not None:
            self.adder.reset()
