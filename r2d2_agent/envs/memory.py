"""Memory tasks: small Gymnasium envs that a policy can only solve by remembering.

Each task has vector observations, a few actions, short episodes and a documented
`score_range` (min, max) of its undiscounted return, so that benchmark returns can be put
on one scale, `normalise_score(ret, score_range)` in [-1, 1] (through `gym.make`'s wrappers:
`env.get_wrapper_attr("score_range")`). Each is seeded through
`reset(seed=...)` (the same seed gives the same episode) and ends an episode with
`terminated=True` when the task is over, `truncated=True` only at a time limit.

* `TMaze(length)`: a corridor; the cue (go up or down) is seen only at the start, the
  choice is made at the junction `length` steps on; sparse reward +-1.
* `CueRecall(delay, symbols)`: a one-hot cue shown once, `delay` blank steps, then a query:
  name the cue; +-1.
* `RepeatPrevious(k, symbols, length)`: a one-hot symbol every step; each action must equal
  the symbol shown `k` steps before; +-1/(length - k) per graded step.
* `NoisyMaskedCartPole(noise_std)`: CartPole with positions only (`MaskedCartPole`) plus
  Gaussian observation noise.

Importing `r2d2_agent.envs` registers them as `"r2d2_agent/<Name>-v0"`
(`register_memory_envs`). This module needs only numpy and Gymnasium (no TensorFlow): a
peer library's process may load it by file path, `importlib.util.spec_from_file_location`,
without the package (its CartPole then loads `masked_cartpole.py` from beside it).
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

if __name__ == "r2d2_agent.envs.memory":
    from r2d2_agent.envs.masked_cartpole import MaskedCartPole
else:  # loaded by file path, without the package (a peer library's process)
    _spec = importlib.util.spec_from_file_location(
        "_r2d2_masked_cartpole", pathlib.Path(__file__).with_name("masked_cartpole.py")
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    MaskedCartPole = _module.MaskedCartPole

__all__ = [
    "MEMORY_ENV_IDS",
    "CueRecall",
    "NoisyMaskedCartPole",
    "RepeatPrevious",
    "TMaze",
    "make_noisy_masked_cartpole",
    "normalise_score",
    "register_memory_envs",
]

#: Registered ids, by class name.
MEMORY_ENV_IDS = {
    "TMaze": "r2d2_agent/TMaze-v0",
    "CueRecall": "r2d2_agent/CueRecall-v0",
    "RepeatPrevious": "r2d2_agent/RepeatPrevious-v0",
    "NoisyMaskedCartPole": "r2d2_agent/NoisyMaskedCartPole-v0",
}


def normalise_score(episode_return: float, score_range: tuple[float, float]) -> float:
    """Maps a return from `score_range` (min, max) linearly onto [-1, 1].

    Args:
        episode_return: An undiscounted episode return (or a mean of them).
        score_range: The task's (minimum, maximum) return.

    Returns:
        -1 at the minimum, 1 at the maximum.

    Raises:
        ValueError: If the range is empty.

    Example:
        >>> normalise_score(250.0, (0.0, 500.0))
        0.0
    """
    low, high = score_range
    if not high > low:
        raise ValueError(f"score_range must have min < max, got {score_range}")
    return 2.0 * (float(episode_return) - low) / (high - low) - 1.0


def _check_int(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


class TMaze(gym.Env):
    """A T-maze: remember a cue seen at the start of a corridor, choose at its end.

    The agent starts at position 0 and sees the cue; the junction is at position `length`.
    Observation, float32 of shape (4,): `[cue_up, cue_down, in_corridor, at_junction]`
    (the cue's one-hot only at position 0). Actions: 0 forward (one position on; at the
    junction it does nothing), 1 up, 2 down (turns; before the junction they do nothing).
    Turning at the junction ends the episode (`terminated`) with +1 if the turn matches the
    cue, else -1; every other step gives 0. After `max_steps` steps without turning at the
    junction the episode is `truncated` with return 0.

    The optimal return is 1 in `length + 1` steps; a uniform random policy scores 0 in
    expectation (the cue is independent of its turns). `score_range` is (-1, 1).

    Args:
        length: Forward steps from the cue to the junction (>= 1).
        max_steps: Time limit in steps (>= length + 1); default `3 * (length + 1)`.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 5, max_steps: int | None = None) -> None:
        _check_int("length", length, 1)
        if max_steps is None:
            max_steps = 3 * (length + 1)
        _check_int("max_steps", max_steps, length + 1)
        self.length = int(length)
        self.max_steps = int(max_steps)
        self.score_range = (-1.0, 1.0)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self._position = 0
        self._cue = 0
        self._steps = 0

    def _observation(self) -> np.ndarray:
        obs = np.zeros(4, dtype=np.float32)
        if self._position == 0:
            obs[self._cue] = 1.0
        elif self._position < self.length:
            obs[2] = 1.0
        else:
            obs[3] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts an episode at the cue (0 up, 1 down, drawn uniformly)."""
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        self._position = 0
        self._steps = 0
        return self._observation(), {"cue": self._cue}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Moves forward or turns; see the class docstring."""
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(f"TMaze action must be 0, 1 or 2, got {action!r}")
        self._steps += 1
        reward, terminated = 0.0, False
        at_junction = self._position == self.length
        if action == 0 and not at_junction:
            self._position += 1
        elif action in (1, 2) and at_junction:
            reward = 1.0 if action - 1 == self._cue else -1.0
            terminated = True
        truncated = not terminated and self._steps >= self.max_steps
        return self._observation(), reward, terminated, truncated, {"cue": self._cue}


class CueRecall(gym.Env):
    """Name a cue shown once, after a delay.

    Observation, float32 of shape (symbols + 1,): at step 0 the cue's one-hot (last entry
    0); then `delay` blank steps (all zeros); then the query (all zeros but the last entry,
    1). Actions: `symbols`; only the action taken at the query is graded: +1 if it names
    the cue, else -1, and the episode ends (`terminated`) after `delay + 2` steps.

    The optimal return is 1; a uniform random policy scores `2 / symbols - 1` in
    expectation. `score_range` is (-1, 1).

    Args:
        delay: Blank steps between the cue and the query (>= 0).
        symbols: Number of cues and of actions (>= 2).
    """

    metadata = {"render_modes": []}

    def __init__(self, delay: int = 10, symbols: int = 4) -> None:
        _check_int("delay", delay, 0)
        _check_int("symbols", symbols, 2)
        self.delay = int(delay)
        self.symbols = int(symbols)
        self.score_range = (-1.0, 1.0)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.symbols + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.symbols)
        self._cue = 0
        self._t = 0

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.symbols + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        elif self._t == self.delay + 1:
            obs[-1] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts an episode showing a uniformly drawn cue."""
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.symbols))
        self._t = 0
        return self._observation(), {"cue": self._cue}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advances one step; grades the action taken at the query."""
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(f"CueRecall action must be in [0, {self.symbols}), got {action!r}")
        if self._t > self.delay + 1:
            raise RuntimeError("CueRecall.step after the episode ended; call reset()")
        reward, terminated = 0.0, False
        if self._t == self.delay + 1:
            reward = 1.0 if action == self._cue else -1.0
            terminated = True
        self._t += 1
        return self._observation(), reward, terminated, False, {"cue": self._cue}


class RepeatPrevious(gym.Env):
    """Repeat the symbol shown `k` steps ago, every step.

    Observation, float32 of shape (symbols,): a uniformly drawn symbol's one-hot each step.
    Actions: `symbols`. The action at step t (0-based) is graded for t >= k: it must equal
    the symbol observed at step t - k; +1/(length - k) if so, else -1/(length - k). The
    episode ends (`terminated`) after `length` steps.

    The optimal return is 1; a uniform random policy scores `2 / symbols - 1` in
    expectation. `score_range` is (-1, 1).

    Args:
        k: How many steps back (>= 1).
        symbols: Number of symbols and of actions (>= 2).
        length: Steps per episode (> k).
    """

    metadata = {"render_modes": []}

    def __init__(self, k: int = 4, symbols: int = 4, length: int = 50) -> None:
        _check_int("k", k, 1)
        _check_int("symbols", symbols, 2)
        _check_int("length", length, k + 1)
        self.k = int(k)
        self.symbols = int(symbols)
        self.length = int(length)
        self.score_range = (-1.0, 1.0)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.symbols,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.symbols)
        self._shown: list[int] = []

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.symbols, dtype=np.float32)
        obs[self._shown[-1]] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts an episode showing the first symbol."""
        super().reset(seed=seed)
        self._shown = [int(self.np_random.integers(self.symbols))]
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Grades the action against the symbol `k` steps back, shows the next symbol."""
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(
                f"RepeatPrevious action must be in [0, {self.symbols}), got {action!r}"
            )
        t = len(self._shown) - 1
        if t >= self.length:
            raise RuntimeError("RepeatPrevious.step after the episode ended; call reset()")
        reward = 0.0
        if t >= self.k:
            unit = 1.0 / (self.length - self.k)
            reward = unit if action == self._shown[t - self.k] else -unit
        self._shown.append(int(self.np_random.integers(self.symbols)))
        terminated = t + 1 >= self.length
        return self._observation(), reward, terminated, False, {}


class NoisyMaskedCartPole(gym.ObservationWrapper):
    """`MaskedCartPole` (cart position and pole angle only) plus Gaussian noise.

    Each observation gets independent noise of standard deviation `noise_std` (in the
    observation's units: metres and radians) added, drawn from the env's seeded generator.
    CartPole-v1's time limit (500 steps) truncates. `score_range` is (0, 500).

    Args:
        env: A CartPole env (observation `Box` of shape (4,)); default
            `gym.make("CartPole-v1")`.
        noise_std: Noise standard deviation (>= 0).
    """

    def __init__(self, env: gym.Env | None = None, noise_std: float = 0.05) -> None:
        if not (isinstance(noise_std, (int, float)) and np.isfinite(noise_std)) or noise_std < 0:
            raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
        super().__init__(MaskedCartPole(env if env is not None else gym.make("CartPole-v1")))
        self.noise_std = float(noise_std)
        self.score_range = (0.0, 500.0)
        self.observation_space = spaces.Box(
            -np.inf, np.inf, shape=self.env.observation_space.shape, dtype=np.float32
        )

    def observation(self, observation: Any) -> np.ndarray:
        """The masked observation plus noise."""
        obs = np.asarray(observation, dtype=np.float32)
        noise = self.env.unwrapped.np_random.normal(0.0, self.noise_std, size=obs.shape)
        return (obs + noise).astype(np.float32)


def make_noisy_masked_cartpole(noise_std: float = 0.05, **kwargs: Any) -> gym.Env:
    """`NoisyMaskedCartPole(gym.make("CartPole-v1", **kwargs), noise_std)` (the entry point
    of `"r2d2_agent/NoisyMaskedCartPole-v0"`)."""
    return NoisyMaskedCartPole(gym.make("CartPole-v1", **kwargs), noise_std=noise_std)


def register_memory_envs() -> None:
    """Registers the tasks as `"r2d2_agent/<Name>-v0"` with Gymnasium (idempotent; runs on
    import of `r2d2_agent.envs`). Constructor arguments pass through `gym.make`."""
    entry = {
        "TMaze": "r2d2_agent.envs.memory:TMaze",
        "CueRecall": "r2d2_agent.envs.memory:CueRecall",
        "RepeatPrevious": "r2d2_agent.envs.memory:RepeatPrevious",
        "NoisyMaskedCartPole": "r2d2_agent.envs.memory:make_noisy_masked_cartpole",
    }
    for name, env_id in MEMORY_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry[name])
