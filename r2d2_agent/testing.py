"""Small environments for tests and examples.

Importing this module registers the Gymnasium id ``"r2d2_agent/MaskedCartPole-v1"``:
CartPole-v1 with only the cart position and pole angle observed (both velocities dropped), a
partially observable task that a recurrent agent can solve and a feed-forward one cannot.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "MASKED_CARTPOLE_ID", "MaskedCartPole", "make_masked_cartpole", "register_envs",
    "train_until_solved",
]

MASKED_CARTPOLE_ID = "r2d2_agent/MaskedCartPole-v1"

#: Indices of CartPole's observation kept by :class:`MaskedCartPole` (position, angle).
KEPT_INDICES = (0, 2)


class MaskedCartPole(gym.ObservationWrapper):
    """CartPole observing only cart position and pole angle (indices 0 and 2).

    Args:
        env: A CartPole environment (observation ``Box`` of shape ``(4,)``).

    Raises:
        ValueError: If the observation space is not a ``Box`` of shape ``(4,)``.
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
    """Create ``MaskedCartPole(gym.make("CartPole-v1", **kwargs))``.

    Module-level, so ``functools.partial(make_masked_cartpole, ...)`` pickles.

    Args:
        **kwargs: Forwarded to ``gymnasium.make`` (e.g. ``render_mode``, ``max_episode_steps``).

    Returns:
        The masked environment.
    """
    return MaskedCartPole(gym.make("CartPole-v1", **kwargs))


def register_envs() -> None:
    """Register ``"r2d2_agent/MaskedCartPole-v1"`` with Gymnasium (idempotent; runs on import)."""
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(
            id=MASKED_CARTPOLE_ID,
            entry_point="r2d2_agent.testing:make_masked_cartpole",
            reward_threshold=475.0,
        )


register_envs()


def train_until_solved(agent: Any, make_env: Any, nb_steps: int, eval_interval: int = 2_500,
                       eval_episodes: int = 10, threshold: float = 475.0,
                       eval_seed: int = 1_000, stop_when_solved: bool = True) -> dict[str, Any]:
    """Trains an `R2D2Agent` in chunks and evaluates it greedily after each chunk.

    This is the protocol of the peer benchmarks (`shared/peers`): a greedy evaluation of
    `eval_episodes` episodes every `eval_interval` training env steps; "solved" is the first
    evaluation whose mean return reaches `threshold`.

    Args:
        agent: a compiled `R2D2Agent`.
        make_env: zero-argument callable returning a gymnasium env.
        nb_steps: training budget in env steps.
        eval_interval: env steps between evaluations.
        eval_episodes: episodes per evaluation.
        threshold: mean return that counts as solved.
        eval_seed: seed of the evaluation env's first reset.
        stop_when_solved: stop training at the first solve.

    Returns:
        A dict with `solved_at` (env steps, or None), `solved_wall_s`, `evals` (list of
        (env steps, mean return)), `env_steps` and `wall_s`.
    """
    import time

    train_env, eval_env = make_env(), make_env()
    eval_env.reset(seed=eval_seed)
    start = time.perf_counter()
    steps, evals, solved_at, solved_wall = 0, [], None, None
    while steps < nb_steps:
        chunk = min(eval_interval, nb_steps - steps)
        agent.fit(train_env, nb_steps=chunk, verbose=0)
        steps += chunk
        history = agent.test(eval_env, nb_episodes=eval_episodes, visualize=False, verbose=0)
        mean_return = float(np.mean(history.history["episode_reward"]))
        evals.append((steps, mean_return))
        if mean_return >= threshold and solved_at is None:
            solved_at, solved_wall = steps, time.perf_counter() - start
            if stop_when_solved:
                break
    return {"solved_at": solved_at, "solved_wall_s": solved_wall, "evals": evals,
            "env_steps": steps, "wall_s": time.perf_counter() - start}
