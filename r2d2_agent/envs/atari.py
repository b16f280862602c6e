"""Atari (ALE) envs with the standard preprocessing, for `r2d2-train` and the Atari example.

`make_atari` is a module-level function, so `functools.partial(make_atari, env_id)` is a
picklable env factory. ale-py (`pip install "r2d2-agent[atari]"`) is imported only when an
Atari env is made or looked up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ATARI_FRAME_SHAPE", "is_atari_id", "make_atari", "register_atari_envs"]

ATARI_FRAME_SHAPE = (84, 84)
"""One preprocessed frame: 84x84 grayscale (`InputType.GRAY_2ch`)."""


def register_atari_envs() -> bool:
    """Registers ale-py's envs with Gymnasium; False if ale-py is not installed."""
    try:
        import ale_py
    except ImportError:
        return False
    import gymnasium

    gymnasium.register_envs(ale_py)
    return True


def is_atari_id(env_id: str) -> bool:
    """Whether `env_id` names an ALE game (`ALE/...`, or an id registered by ale-py)."""
    import gymnasium

    if env_id.startswith("ALE/"):
        return True
    spec = gymnasium.envs.registry.get(env_id)
    return spec is not None and "ale_py" in str(spec.entry_point)


def make_atari(env_id: str, terminal_on_life_loss: bool = False) -> Any:
    """An Atari env with gymnasium's `AtariPreprocessing`: 84x84 grayscale frames, frame
    skip 4, up to 30 no-op starts, optionally a terminal on each life lost; no reward
    clipping (R2D2 rescales values instead).

    Args:
        env_id: An ALE id, e.g. "ALE/Pong-v5".
        terminal_on_life_loss: End an episode when a life is lost.

    Raises:
        ImportError: Without ale-py (the message says what to install).
    """
    import gymnasium

    if not register_atari_envs():
        raise ImportError(f"{env_id} needs ale-py: pip install 'r2d2-agent[atari]'")
    env = gymnasium.make(env_id, frameskip=1)  # AtariPreprocessing does the frame skip
    return gymnasium.wrappers.AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=4,
        screen_size=ATARI_FRAME_SHAPE[0],
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=True,
    )
