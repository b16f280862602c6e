"""Where a run's randomness starts: the seed of a fresh run, or of one resumed."""

from __future__ import annotations

import numpy as np

__all__ = ["SEED_LIMIT", "resumed_seed"]

SEED_LIMIT = 2**31
"""Seeds `resumed_seed` draws lie in [0, SEED_LIMIT) (an env, numpy and TensorFlow take
them; the offsets of actors and envs added to them stay far below 2^32)."""


def resumed_seed(seed: int | None, env_steps: int) -> int | None:
    """The seed a run's actors, envs and learner start from after `env_steps` trained
    env steps.

    A fresh run (`env_steps` 0) starts from `seed` itself. A run resumed from a checkpoint
    at `env_steps` starts from a seed drawn from `(seed, env_steps)` (numpy's
    `SeedSequence`): its envs and its exploration do not replay the episodes and draws the
    run began with, and resuming twice from the same checkpoint replays the same.

    Args:
        seed: The config's seed (an int >= 0), or None (fresh randomness either way).
        env_steps: Env steps the run has trained (a checkpoint's count), >= 0.

    Returns:
        None if `seed` is None, else an int in [0, SEED_LIMIT).

    Raises:
        ValueError: If `env_steps` is not an int >= 0.

    Example:
        >>> resumed_seed(7, 0), resumed_seed(None, 5_000)
        (7, None)
        >>> resumed_seed(7, 5_000) == resumed_seed(7, 5_000) != resumed_seed(7, 10_000)
        True
    """
    if isinstance(env_steps, bool) or not isinstance(env_steps, (int, np.integer)) or env_steps < 0:
        raise ValueError(f"env_steps must be an int >= 0, got {env_steps!r}")
    if seed is None or env_steps == 0:
        return seed
    state = np.random.SeedSequence([int(seed), int(env_steps)]).generate_state(1, np.uint64)
    return int(state[0] % SEED_LIMIT)
