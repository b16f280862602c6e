"""Environments: checks of an env against a config, the keras-rl adapter, test tasks.

* `check_env_spaces`, `check_env_matches_config`: no TensorFlow, usable in the manager's
  parent process before any child starts.
* `GymnasiumEnv`, `as_keras_rl_env`: a Gymnasium env behind keras-rl's `rl.core.Env`
  API (imports TensorFlow through keras-rl, so they load on first use).
* `MaskedCartPole`, registered as `"r2d2_agent/MaskedCartPole-v1"`: CartPole with the
  velocities hidden, a task that needs memory.
* `TMaze`, `CueRecall`, `RepeatPrevious`, `NoisyMaskedCartPole`, registered as
  `"r2d2_agent/<Name>-v0"`: memory tasks with a `score_range` for normalised returns
  (`r2d2_agent.envs.memory`; numpy and Gymnasium only).
* `make_atari`: an ALE game with the standard preprocessing (needs the `atari` extra).
* `EnvPoolAtari`: a factory of N ALE games with the same preprocessing, stepped in C++ by
  envpool (a Gymnasium `VectorEnv` for one actor; needs the `envpool` extra).
* `make_env`: any registered id (`make_atari` for ALE games): the env factory of
  `r2d2-train`.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2_agent.envs.atari import is_atari_id, make_atari
from r2d2_agent.envs.by_id import make_env
from r2d2_agent.envs.checks import check_env_matches_config, check_env_spaces
from r2d2_agent.envs.envpool_atari import EnvPoolAtari
from r2d2_agent.envs.masked_cartpole import (
    MASKED_CARTPOLE_ID,
    MaskedCartPole,
    make_masked_cartpole,
)
from r2d2_agent.envs.memory import (
    MEMORY_ENV_IDS,
    CueRecall,
    NoisyMaskedCartPole,
    RepeatPrevious,
    TMaze,
    normalise_score,
    register_memory_envs,
)

register_memory_envs()

_LAZY = {"GymnasiumEnv", "as_keras_rl_env"}

__all__ = [
    "MASKED_CARTPOLE_ID",
    "MEMORY_ENV_IDS",
    "CueRecall",
    "EnvPoolAtari",
    "GymnasiumEnv",
    "MaskedCartPole",
    "NoisyMaskedCartPole",
    "RepeatPrevious",
    "TMaze",
    "as_keras_rl_env",
    "check_env_matches_config",
    "check_env_spaces",
    "is_atari_id",
    "make_atari",
    "make_env",
    "make_masked_cartpole",
    "normalise_score",
    "register_memory_envs",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module("r2d2_agent.envs.gymnasium_env"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent.envs' has no attribute {name!r}")
