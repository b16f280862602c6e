"""`R2D2Actor`: epsilon-greedy acting with a carried recurrent state, feeding an adder
(`R2D2VectorActor`, in `roles.vector_actor`, acts in N envs at once).

The actor does not know where its weights come from or where its sequences go: it takes
weights through `set_weights` and hands transitions to a `SequenceAdder` whose sink may be
a local learner or a channel to a learner process. It follows Acme's actor contract
(`observe_first`, `select_action`, `observe`), which `EpisodeLoop` drives.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.networks.policies import Policy
from r2d2_agent.replay.adder import SequenceAdder

__all__ = ["R2D2Actor"]


class R2D2Actor:
    """Acts in one environment and records what it did.

    Args:
        config: The agent's configuration.
        policy: The Q-network to act with (`R2D2Builder.make_policy`).
        adder: Where transitions go; None for an actor that only plays (evaluation).
        epsilon: Exploration rate of this actor (e.g. its Ape-X epsilon_i), in [0, 1].
        seed: Seed of the actor's exploration randomness.

    Raises:
        ValueError: If `epsilon` is outside [0, 1].
    """

    def __init__(
        self,
        config: R2D2Config,
        policy: Policy,
        adder: SequenceAdder | None,
        epsilon: float,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.config = config
        self.policy = policy
        self.adder = adder
        self.epsilon = float(epsilon)
        self._rng = np.random.default_rng(seed)
        self._frames: collections.deque[np.ndarray] = collections.deque(
            maxlen=config.input_sequence
        )
        self._state = np.zeros((1, 2, config.state_size), np.float32)
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # (state before, Q) of s_t
        self._prev_action = -1  # the action before the current step (-1: none yet)
        self._prev_reward = 0.0
        self.episode_started = False

    def reseed(self, seed: int | None) -> None:
        """Restarts the exploration's random draws from `seed` (a resumed run's)."""
        self._rng = np.random.default_rng(seed)

    # Acme-style interface -------------------------------------------------------------

    def observe_first(self, observation: Any) -> None:
        """Starts an episode at its first observation (resets frames and state)."""
        frame = np.array(observation)  # a copy: envs may reuse one observation buffer
        self._frames.clear()
        for _ in range(self.config.input_sequence - 1):
            self._frames.append(np.zeros_like(frame))  # zero frames before the episode
        self._frames.append(frame)
        self._state = np.zeros_like(self._state)
        self._last = None
        self._prev_action = -1
        self._prev_reward = 0.0
        self.episode_started = True
        if self.adder is not None:
            self.adder.reset()
            self.adder.add_first(frame)

    def select_action(self) -> int:
        """ε-greedy action for the current observation; advances the recurrent state."""
        if not self.episode_started:
            raise RuntimeError("call observe_first(observation) before select_action()")
        q, next_state = self._policy_step(self.stacked_observation())
        return self.act_on(q[0], next_state[0])

    def act_on(self, q: np.ndarray, next_state: np.ndarray, greedy: int | None = None) -> int:
        """ε-greedy action from Q-values the policy computed for the current observation.

        `select_action` is `policy_inputs`, one policy step and this; an actor of several
        envs (`R2D2VectorActor`) runs the policy step once for all of them.

        Args:
            q: `(nb_actions,)` Q-values of the current observation.
            next_state: `(2, lstm_units)` recurrent state after it.
            greedy: `argmax(q)` if the caller has it (N envs take it in one call).
        """
        self._last = (self._state[0], q)
        self._state = next_state[None]
        if self.epsilon > 0.0 and self._rng.random() < self.epsilon:
            return int(self._rng.integers(self.config.nb_actions))
        return int(np.argmax(q)) if greedy is None else greedy

    def policy_inputs(self) -> tuple[np.ndarray, np.ndarray, int, float]:
        """What the policy step of `select_action` takes, for this env alone.

        Returns:
            `(stacked, state, prev_action, prev_reward)`: the stacked frames
            `(input_sequence, *frame)`, the recurrent state `(2, lstm_units)`, the
            previous action (-1: none) and reward (as the network takes it).

        Raises:
            RuntimeError: Before `observe_first`.
        """
        if not self.episode_started:
            raise RuntimeError("call observe_first(observation) before select_action()")
        return (
            self.stacked_observation(),
            self._state[0],
            self._prev_action,
            self._prev_reward_input(),
        )

    def observe(
        self, action: int, reward: float, next_observation: Any, terminated: bool, truncated: bool
    ) -> None:
        """Records the transition that followed `select_action`."""
        if self._last is None:
            raise RuntimeError("observe() needs a select_action() before it")
        frame = np.array(next_observation)  # a copy, as in observe_first
        self._frames.append(frame)
        state_before, q = self._last
        self._last = None
        self._prev_action = int(action)
        self._prev_reward = float(reward)
        if self.adder is not None:
            next_q = None
            if truncated and not terminated:  # bootstrap value for the initial priority
                next_q = self._policy_step(self.stacked_observation())[0][0]
            self.adder.add(
                action,
                float(reward),
                frame,
                bool(terminated),
                bool(truncated),
                state_before,
                q,
                next_q,
            )
        if terminated or truncated:
            self.episode_started = False

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Takes new network weights (Keras `get_weights()` order)."""
        self.policy.set_weights(weights)

    # Helpers ----------------------------------------------------------------------------

    def _policy_step(self, stacked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One policy step from the current state (with the previous action and reward
        when the network takes them; the reward divided by the policy's reward scale with
        `normalize_rewards`, as the learner divides it)."""
        if not self.config.enable_prev_action_reward:
            return self.policy.step(stacked[None], self._state)
        return self.policy.step(
            stacked[None],
            self._state,
            np.array([self._prev_action], np.int32),
            np.array([self._prev_reward_input()], np.float32),
        )

    def _prev_reward_input(self) -> float:
        """The previous reward as the network takes it: divided by the policy's reward
        scale with `normalize_rewards`, as the learner divides it."""
        reward = self._prev_reward
        if self.config.normalize_rewards:
            reward /= self.policy.reward_scale
        return reward

    def stacked_observation(self) -> np.ndarray:
        """The current network input, shape (input_sequence, *frame)."""
        return np.stack(self._frames)

    def q_values(self, observation: Any = None) -> np.ndarray:
        """Q-values (network units) from the current recurrent state, which is not advanced.

        Args:
            observation: A new frame to rate as if it came next (the frame stack is not
                changed); None rates the current observation.
        """
        if observation is None:
            stacked = self.stacked_observation()
        else:
            frame = np.asarray(observation)
            previous = (
                list(self._frames)[1:]
                if self.episode_started
                else [np.zeros_like(frame)] * (self.config.input_sequence - 1)
            )
            stacked = np.stack([*previous, frame])
        q, _ = self._policy_step(stacked)
        return q[0]

    def reset_state(self) -> None:
        """Forgets the episode: frames, recurrent state and the adder's partial episode."""
        self._frames.clear()
        self._state = np.zeros_like(self._state)
        self._last = None
        self._prev_action = -1
        self._prev_reward = 0.0
        self.episode_started = False
        if self.adder is not None:
            self.adder.reset()
