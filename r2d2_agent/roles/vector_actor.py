"""`R2D2VectorActor`: ε-greedy acting in N envs at once, one batched forward pass per step.

Each env keeps what a single-env `R2D2Actor` keeps (its frame stack, recurrent state,
previous action and reward, exploration rate and random generator), held here as rows of
arrays, so that a step of all N envs is a handful of array operations and one call of
the policy and of the adder (`VectorSequenceAdder`), not N of each. Env `j` acts exactly
as an `R2D2Actor` built with `epsilons[j]` and `seeds[j]` would (the same ε draws from its
own generator, the same network inputs), and its records are those its `SequenceAdder`
would emit (`tests/test_vector_actor.py`), with either adder of N envs
(`replay.env_adders`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.networks.policies import Policy
from r2d2_agent.replay.env_adders import VectorAdder, add_env_step

__all__ = ["R2D2VectorActor"]


def _check_epsilons(epsilons: Sequence[float]) -> list[float]:
    """The rates as floats; ValueError naming one outside [0, 1]."""
    rates = [float(e) for e in epsilons]
    for rate in rates:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {rate!r}")
    return rates


class R2D2VectorActor:
    """Acts in N envs at once: one batched policy step and one adder call per step of all N.

    Args:
        config: The agent's configuration.
        policy: The Q-network all envs act with (`R2D2Builder.make_policy`).
        adder: Where the N envs' transitions go (`R2D2Builder.make_vector_adder`, one
            sink per env: a `VectorSequenceAdder` or `PerEnvAdders`); None for an actor
            that only plays.
        epsilons: Exploration rate of each env (e.g. its Ape-X epsilon_i), in [0, 1].
        seeds: Seed of each env's exploration randomness (None: all unseeded).

    Attributes:
        taps: Per env, None or an object with a `SequenceAdder`'s `reset`, `add_first`
            and `add` that gets env `j`'s calls as its own adder would (e.g. the
            `EpisodeRecorder` of `StateDiscrepancyCallback`), besides `adder`.

    Raises:
        ValueError: If the lengths disagree, there is no env, or a rate is outside [0, 1].
        TypeError: If `adder` is a list of per-env adders.
    """

    def __init__(
        self,
        config: R2D2Config,
        policy: Policy,
        adder: VectorAdder | None,
        epsilons: Sequence[float],
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        n = len(epsilons)
        if n < 1:
            raise ValueError("R2D2VectorActor needs at least one env (one epsilon per env)")
        seeds = [None] * n if seeds is None else list(seeds)
        if len(seeds) != n:
            raise ValueError(
                f"one epsilon and seed per env: got {n} epsilons and {len(seeds)} seeds"
            )
        if isinstance(adder, (list, tuple)):
            raise TypeError(
                "R2D2VectorActor takes one adder for its N envs "
                "(R2D2Builder.make_vector_adder(sinks), one sink per env), got a "
                f"{type(adder).__name__} of {len(adder)}"
            )
        if adder is not None and adder.num_envs != n:
            raise ValueError(f"the adder records {adder.num_envs} envs, got {n} epsilons")
        self.config = config
        self.policy = policy
        self.adder = adder
        self.taps: list[Any] = [None] * n
        self._epsilons = _check_epsilons(epsilons)
        self._rngs = [np.random.default_rng(seed) for seed in seeds]
        self._stacks: np.ndarray | None = None  # (N, S, *frame), made by observe_first
        self._states = np.zeros((n, 2, config.state_size), np.float32)
        self._prev_actions = np.full(n, -1, np.int32)  # -1: no action yet
        self._prev_rewards = np.zeros(n, np.float64)
        self._started = [False] * n
        self._acted: tuple[np.ndarray, np.ndarray] | None = None  # states before, Q

    @property
    def num_envs(self) -> int:
        """Number of envs (N)."""
        return len(self._epsilons)

    @property
    def epsilons(self) -> tuple[float, ...]:
        """Each env's exploration rate."""
        return tuple(self._epsilons)

    def reseed(self, seeds: Sequence[int | None]) -> None:
        """Restarts each env's exploration draws from its seed (a resumed run's).

        Raises:
            ValueError: If there is not one seed per env.
        """
        if len(seeds) != self.num_envs:
            raise ValueError(f"one seed per env: {self.num_envs} envs, got {len(seeds)}")
        self._rngs = [np.random.default_rng(seed) for seed in seeds]

    def set_epsilons(self, epsilons: Sequence[float]) -> None:
        """Sets each env's exploration rate (e.g. annealed).

        Raises:
            ValueError: On a wrong number of rates or a rate outside [0, 1].
        """
        rates = _check_epsilons(epsilons)
        if len(rates) != self.num_envs:
            raise ValueError(f"one epsilon per env: {self.num_envs} envs, got {len(rates)}")
        self._epsilons = rates

    def observe_first(self, env: int, observation: Any) -> None:
        """Starts an episode of env `env` at its first observation (its frames, state and
        previous action and reward start afresh).

        Raises:
            ValueError: If the observation's shape differs from the other envs'.
        """
        frame = np.array(observation)  # a copy: envs may reuse one observation buffer
        if self._stacks is None:
            shape = (self.num_envs, self.config.input_sequence, *frame.shape)
            self._stacks = np.zeros(shape, frame.dtype)
        if frame.shape != self._stacks.shape[2:]:
            raise ValueError(
                f"env {env}'s observation has shape {frame.shape}, the actor's frames "
                f"{self._stacks.shape[2:]}"
            )
        self._stacks[env, :-1] = 0  # zero frames before the episode
        self._stacks[env, -1] = frame
        self._states[env] = 0.0
        self._prev_actions[env] = -1
        self._prev_rewards[env] = 0.0
        self._started[env] = True
        if self.adder is not None:
            self.adder.reset(env)
            self.adder.add_first(env, frame)
        tap = self.taps[env]
        if tap is not None:
            tap.reset()
            tap.add_first(frame)

    def select_actions(self) -> np.ndarray:
        """ε-greedy actions of all envs from one batched policy step, shape `(N,)`;
        advances each env's recurrent state.

        Raises:
            RuntimeError: If an env has no episode started.
        """
        if not all(self._started):
            idle = self._started.index(False)
            raise RuntimeError(f"call observe_first({idle}, observation) before select_actions()")
        q, next_states = self._policy_step(self._stacks, self._states, slice(None))
        self._acted = (self._states, q)
        self._states = np.array(next_states, np.float32)  # a new array: `_acted` keeps its own
        actions = np.argmax(q, axis=-1).tolist()
        nb_actions = self.config.nb_actions
        for j, (rate, rng) in enumerate(zip(self._epsilons, self._rngs, strict=True)):
            if rate > 0.0 and rng.random() < rate:  # as R2D2Actor.act_on draws
                actions[j] = int(rng.integers(nb_actions))
        return np.array(actions, dtype=np.int64)

    def observe_all(
        self,
        actions: Sequence[int] | np.ndarray,
        rewards: Sequence[float] | np.ndarray,
        next_observations: Sequence[Any],
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
    ) -> None:
        """Records the N transitions that followed `select_actions` (one per env, in env
        order; an env whose episode ended gets `observe_first` before the next step).

        Raises:
            RuntimeError: Without a `select_actions` before it.
        """
        if self._acted is None:
            raise RuntimeError("observe_all() needs a select_actions() before it")
        states, q = self._acted
        self._acted = None
        assert self._stacks is not None
        actions = np.asarray(actions)
        rewards = np.asarray(rewards, np.float64)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        frames = np.array(next_observations)  # one copy of the N observations
        stacks = self._stacks
        if stacks.shape[1] > 1:
            stacks[:, :-1] = stacks[:, 1:]
        stacks[:, -1] = frames
        self._prev_actions[:] = actions
        self._prev_rewards[:] = rewards
        for j in np.flatnonzero(terminated | truncated).tolist():
            self._started[j] = False
        taps = [(j, tap) for j, tap in enumerate(self.taps) if tap is not None]
        if self.adder is None and not taps:
            return
        next_q = {  # the bootstrap value of a truncated episode's initial priority
            j: self._policy_step(stacks, self._states, slice(j, j + 1))[0][0]
            for j in np.flatnonzero(truncated & ~terminated).tolist()
        }
        step = (actions, rewards, frames, terminated, truncated, states, q)
        if self.adder is not None:
            self.adder.add(*step, next_q)
        for j, tap in taps:
            add_env_step(tap, j, *step, next_q)

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Takes new network weights (Keras `get_weights()` order), for all envs."""
        self.policy.set_weights(weights)

    def reset_state(self) -> None:
        """Forgets every env's episode (frames, recurrent state, partial sequences)."""
        self._acted = None
        if self._stacks is not None:
            self._stacks[:] = 0
        self._states[:] = 0.0
        self._prev_actions[:] = -1
        self._prev_rewards[:] = 0.0
        self._started = [False] * self.num_envs
        for j in range(self.num_envs):
            if self.adder is not None:
                self.adder.reset(j)
            if self.taps[j] is not None:
                self.taps[j].reset()

    def _policy_step(
        self, stacks: np.ndarray, states: np.ndarray, envs: slice
    ) -> tuple[np.ndarray, np.ndarray]:
        """One policy step of the envs `envs` from `states` (with the previous actions
        and rewards when the network takes them, the rewards divided by the policy's
        reward scale with `normalize_rewards`, as `R2D2Actor` does)."""
        if not self.config.enable_prev_action_reward:
            return self.policy.step(stacks[envs], states[envs])
        rewards = self._prev_rewards[envs]
        if self.config.normalize_rewards:
            rewards = rewards / self.policy.reward_scale
        return self.policy.step(
            stacks[envs], states[envs], self._prev_actions[envs], rewards.astype(np.float32)
        )
