"""`make_env`: any registered Gymnasium id as an env, ALE games with Atari preprocessing.

A module-level function, so `functools.partial(make_env, env_id)` is a picklable env
factory that works in a spawned child too: it registers this package's envs and ale-py's
(when installed) before `gymnasium.make`. `r2d2-train` builds every env through it.
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.envs.atari import is_atari_id, make_atari, register_atari_envs
from r2d2_agent.envs.masked_cartpole import register_envs

__all__ = ["make_env"]


def make_env(env_id: str, terminal_on_life_loss: bool = False, **kwargs: Any) -> Any:
    """`gymnasium.make(env_id, **kwargs)`, or `make_atari` for an ALE game.

    Args:
        env_id: A registered Gymnasium id (or "module:Id", which imports the module).
        terminal_on_life_loss: ALE games only: a life lost ends the episode.
        **kwargs: Keyword arguments of `gymnasium.make` (not for ALE games).

    Raises:
        gymnasium.error.Error: If the id is not registered (Gymnasium's message suggests
            close ids).
        ImportError: An ALE id without ale-py (the message says what to install).
    """
    import gymnasium

    register_envs()
    register_atari_envs()
    if is_atari_id(env_id):
        return make_atari(env_id, terminal_on_life_loss)
    return gymnasium.make(env_id, **kwargs)
