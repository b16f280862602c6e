"""Checks of an environment's spaces against R2D2's needs and a config (no TensorFlow).

They run wherever an env meets a config: `R2D2Agent.fit`/`test` and the `R2D2Manager`
parent before any child starts, which must not import TensorFlow. The manager also calls
`check_env_reset` there once (as Stable-Baselines3's `check_env` does), so an env that
fails in `reset()` is reported at once rather than by every actor, restart after restart.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from r2d2_agent.config import R2D2Config

__all__ = ["check_env_matches_config", "check_env_reset", "check_env_spaces"]


def check_env_spaces(
    observation_space: gymnasium.Space, action_space: gymnasium.Space
) -> tuple[tuple[int, ...], int]:
    """Check that an environment's spaces are usable by R2D2.

    Args:
        observation_space: Must be a non-scalar `gymnasium.spaces.Box`.
        action_space: Must be a `gymnasium.spaces.Discrete` starting at 0.

    Returns:
        `(observation_shape, nb_actions)`.

    Raises:
        ValueError: If a space is not supported; the message names the space.
    """
    if not isinstance(action_space, spaces.Discrete):
        kind = "continuous " if isinstance(action_space, spaces.Box) else ""
        raise ValueError(
            f"{kind}action space {action_space!r} is not supported; "
            "R2D2 needs gymnasium.spaces.Discrete"
        )
    if int(action_space.start) != 0:
        raise ValueError(
            f"action space {action_space!r} starts at {int(action_space.start)}; R2D2 needs "
            "actions 0..n-1 (wrap the env in a gymnasium.ActionWrapper that adds the offset)"
        )
    if not isinstance(observation_space, spaces.Box):
        raise ValueError(
            f"observation space {observation_space!r} is not supported; R2D2 needs "
            "gymnasium.spaces.Box observations (e.g. one-hot encode a Discrete observation "
            "with a gymnasium.ObservationWrapper)"
        )
    shape = tuple(int(d) for d in observation_space.shape)
    if len(shape) == 0:
        raise ValueError(
            f"observation space {observation_space!r} is scalar; R2D2 needs observations with "
            "at least one dimension (reshape them to (1,) with a gymnasium.ObservationWrapper)"
        )
    return shape, int(action_space.n)


def check_env_matches_config(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: R2D2Config,
    observation_dtype: Any = None,
) -> None:
    """Check an environment's spaces against an `R2D2Config`.

    Args:
        observation_space: The env's observation space.
        action_space: The env's action space.
        config: The configuration to check against.
        observation_dtype: The dtype observations will be stored as (None: not checked).

    Raises:
        ValueError: If a space is unsupported (see `check_env_spaces`), the observation
            shape or action count differs from `config.input_shape` / `config.nb_actions`,
            or observations would be stored as integers but are not integers; the
            message names both values.
    """
    shape, nb_actions = check_env_spaces(observation_space, action_space)
    if shape != tuple(config.input_shape):
        raise ValueError(
            f"the env's observation shape {shape} does not match "
            f"config.input_shape {tuple(config.input_shape)}"
        )
    if nb_actions != config.nb_actions:
        raise ValueError(
            f"the env has {nb_actions} actions but config.nb_actions is {config.nb_actions}"
        )
    env_dtype = np.dtype(observation_space.dtype)
    if (
        observation_dtype is not None
        and np.issubdtype(np.dtype(observation_dtype), np.integer)
        and not np.issubdtype(env_dtype, np.integer)
    ):
        raise ValueError(
            f"the env's observations are {env_dtype} but would be stored as "
            f"{np.dtype(observation_dtype)} (the default for image input types): pass "
            "observation_dtype=np.float32, and set config.image_scale for their range"
        )


def check_env_reset(env: gymnasium.Env, seed: int | None = None) -> None:
    """Resets `env` once, as every actor will, and checks what `reset()` returns.

    Args:
        env: The env (e.g. one the factory made; it is left reset, not closed).
        seed: The seed of that reset.

    Raises:
        ValueError: If `reset()` raises (the original exception is chained), does not
            return `(observation, info)` with a dict `info` (the Gymnasium API), or
            returns an observation whose shape differs from its observation space's; the
            message says which.
    """
    try:
        result = env.reset(seed=seed)
    except Exception as exc:
        raise ValueError(
            f"the env's reset() failed: {type(exc).__name__}: {exc} (checked once here, "
            "before any process starts: every actor would fail the same way)"
        ) from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(
            "the env's reset() must return (observation, info) as Gymnasium envs do, got "
            f"{type(result).__name__}"
        )
    observation, info = result
    if not isinstance(info, dict):
        raise ValueError(f"the env's reset() returned info of type {type(info).__name__}, not dict")
    shape = tuple(np.shape(observation))
    expected = tuple(env.observation_space.shape or ())
    if shape != expected:
        raise ValueError(
            f"the env's reset() returned an observation of shape {shape}, but its "
            f"observation_space has shape {expected}"
        )
