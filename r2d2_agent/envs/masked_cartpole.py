"""A partially observable CartPole for tests, examples and benchmarks.

Importing this module registers the Gymnasium id `"r2d2_agent/MaskedCartPole-v1"`:
CartPole-v1 with only the cart position and pole angle observed (both velocities dropped), a
partially observable task that a recurrent agent can solve and a feed-forward one cannot.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "KEPT_INDICES",
    "MASKED_CARTPOLE_ID",
    "MaskedCartPole",
    "make_masked_cartpole",
    "register_envs",
]

MASKED_CARTPOLE_ID = "r2d2_agent/MaskedCartPole-v1"

#: Indices of CartPole's observation kept by `MaskedCartPole` (position, angle).
KEPT_INDICES = (0, 2)


class MaskedCartPole(gym.ObservationWrapper):
    """CartPole observing only cart position and pole angle (indices 0 and 2).

    Args:
        env: A CartPole environment (observation `Box` of shape `(4,)`).

    Raises:
        ValueError: If the observation space is not a `Box` of shape `(4,)`.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or space.shape != (4,):
            raise ValueError(
                f"expected CartPole's Box observation space of shape (4,), got {space}"
            )
        idx = list(KEPT_INDICES)
        self.observation_space = spaces.Box(
            low=space.low[idx], high=space.high[idx], dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        """Keep cart position and pole angle."""
        return np.asarray(observation)[list(KEPT_INDICES)]


def make_masked_cartpole(**kwargs: Any) -> gym.Env:
    """Create `MaskedCartPole(gym.make("CartPole-v1", **kwargs))`.

    Module-level, so `functools.partial(make_masked_cartpole, ...)` pickles.

    Args:
        **kwargs: Forwarded to `gymnasium.make` (e.g. `render_mode`, `max_episode_steps`).

    Returns:
        The masked environment.
    """
    return MaskedCartPole(gym.make("CartPole-v1", **kwargs))


def register_envs() -> None:
    """Register `"r2d2_agent/MaskedCartPole-v1"` with Gymnasium (idempotent; runs on import)."""
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(
            id=MASKED_CARTPOLE_ID,
            entry_point="r2d2_agent.envs.masked_cartpole:make_masked_cartpole",
            reward_threshold=475.0,
        )


register_envs()
