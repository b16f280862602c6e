"""Gymnasium environments as keras-rl `rl.core.Env` objects (old Gym API).

keras-rl agents expect `reset() -> obs` and `step(a) -> (obs, reward, done, info)`.
`GymnasiumEnv` adapts a Gymnasium (>= 1.0) environment to that API while keeping the
termination/truncation distinction in `info["terminated"]` / `info["truncated"]`, so that
R2D2 can bootstrap from the value of the last state when an episode is cut by a time limit, but
not when it reaches a terminal state.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from r2d2_agent.compat import rl_core
from r2d2_agent.envs.checks import check_env_spaces

__all__ = ["GymnasiumEnv", "as_keras_rl_env"]


class GymnasiumEnv(rl_core.Env):
    """A Gymnasium environment behind keras-rl's `rl.core.Env` interface.

    `step` returns `done = terminated or truncated` and adds the bools
    `info["terminated"]` and `info["truncated"]` to (a copy of) the environment's own info
    dict; those two keys override any the environment itself sets.

    Note:
        keras-rl's `Env.__del__` calls `close`, so the wrapped environment is closed
        when this object is garbage collected.

    Attributes:
        env: The wrapped Gymnasium environment.
        observation_shape: Shape of one observation.
        nb_actions: Number of discrete actions.
        reset_info: The info dict returned by the last `reset` (empty before the first).
    """

    def __init__(self, env: gymnasium.Env, seed: int | None = None) -> None:
        """Wrap `env`.

        Args:
            env: A Gymnasium environment with a `Discrete` action space and `Box`
                observation space.
            seed: Passed to the first `reset(seed=...)` only (later resets continue the
                environment's RNG stream); also seeds `action_space`.

        Raises:
            TypeError: If `env` is not a `gymnasium.Env`.
            ValueError: If its spaces are not supported (see `check_env_spaces`).
        """
        if not isinstance(env, gymnasium.Env):
            raise TypeError(f"expected a gymnasium.Env, got {type(env).__name__}")
        self.observation_shape, self.nb_actions = check_env_spaces(
            env.observation_space, env.action_space
        )
        self.env = env
        self.reset_info: dict[str, Any] = {}
        self._next_seed: int | None = None
        self._closed = False
        if seed is not None:
            self.seed(seed)

    @property
    def action_space(self) -> gymnasium.Space:  # type: ignore[override]
        """The wrapped environment's action space."""
        return self.env.action_space

    @property
    def observation_space(self) -> gymnasium.Space:  # type: ignore[override]
        """The wrapped environment's observation space."""
        return self.env.observation_space

    @property
    def unwrapped(self) -> gymnasium.Env:
        """The innermost Gymnasium environment (`env.unwrapped`)."""
        return self.env.unwrapped

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Set the seed used by the next `reset` (and seed `action_space`).

        Args:
            seed: The seed, or `None` to let the next reset continue the current RNG stream.

        Returns:
            `[seed]`, as keras-rl's API expects a list of seeds.
        """
        self._next_seed = None if seed is None else int(seed)
        if seed is not None:
            self.env.action_space.seed(int(seed))
        return [self._next_seed]

    def take_seed(self) -> int | None:
        """Returns the seed set for the next reset and forgets it.

        For a loop that resets the wrapped Gymnasium env itself (`R2D2Agent.fit`/`test`).
        """
        seed = self._next_seed
        self._next_seed = None
        return seed

    def reset(self) -> Any:
        """Reset the environment.

        Returns:
            The first observation of the new episode (its info dict goes to `reset_info`).
        """
        obs, info = self.env.reset(seed=self._next_seed)
        self._next_seed = None
        self.reset_info = dict(info)
        return obs

    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """Take one step.

        Args:
            action: An element of `action_space` (an int in `[0, nb_actions)`).

        Returns:
            `(observation, reward, done, info)` with `done = terminated or truncated` and
            `info["terminated"]` / `info["truncated"]` set.
        """
        if isinstance(action, np.ndarray) and action.ndim == 0:
            action = action.item()
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["terminated"] = bool(terminated)
        info["truncated"] = bool(truncated)
        return obs, float(reward), bool(terminated or truncated), info

    def render(self, mode: str | None = None, close: bool = False) -> Any:
        """Render with the wrapped environment's `render_mode`.

        Args:
            mode: Ignored (Gymnasium fixes the render mode at construction); accepted because
                keras-rl's `Visualizer` passes `mode="human"`.
            close: If true, close the environment instead of rendering.

        Returns:
            Whatever the Gymnasium environment's `render()` returns (None if `close`).
        """
        del mode
        if close:
            self.close()
            return None
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped environment (idempotent)."""
        if self.__dict__.get("_closed", True):
            return
        self._closed = True
        self.env.close()

    def __str__(self) -> str:
        return f"<GymnasiumEnv {self.env}>"

    __repr__ = __str__


def as_keras_rl_env(env: gymnasium.Env | GymnasiumEnv, seed: int | None = None) -> GymnasiumEnv:
    """Return `env` as a `GymnasiumEnv`.

    Args:
        env: A Gymnasium environment (wrapped) or a `GymnasiumEnv` (returned unchanged).
        seed: Seed for the next reset (`GymnasiumEnv.seed`) if not None.

    Returns:
        A `GymnasiumEnv` (the same object if `env` already is one).
    """
    if isinstance(env, GymnasiumEnv):
        if seed is not None:
            env.seed(seed)
        return env
    return GymnasiumEnv(env, seed=seed)
