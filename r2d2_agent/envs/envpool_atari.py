"""N Atari games of one actor stepped by envpool in C++ (the `envpool` extra).

`make_atari` steps one ALE game per Gymnasium env, with its preprocessing in Python.
envpool (`pip install "r2d2-agent[envpool]"`) steps a batch of ALE games in C++ threads
and does the same preprocessing there, so an actor of N envs pays no Python per env step
on the env's side. `EnvPoolAtari` is a picklable factory (a frozen dataclass, as the
manager's actors need) of an `EnvPoolVectorEnv`, a Gymnasium `VectorEnv` of N envs that
an actor takes as it takes any vector env:

    factory = EnvPoolAtari("ALE/Breakout-v5", num_envs=32)
    manager = R2D2Manager(config, factory)  # config.envs_per_actor == 32

What `EnvPoolVectorEnv` adds to envpool's own Gymnasium env:

* frames of shape `(84, 84)` as `make_atari` gives them (envpool's `(1, 84, 84)` with
  `stack_num=1`; R2D2 stacks frames itself and stores each once);
* Gymnasium's reset semantics: `reset(options={"reset_mask": mask})` returns all N
  observations (envpool returns only the reset envs'), and `reset(seed=s)` or
  `reset(seed=[s, s + 1, ...])` reseeds (envpool fixes its seeds when the pool is made:
  env `j` uses `seed + j`, so the pool is made anew at each seeded reset, and not before
  the first reset).

The preprocessing is `make_atari`'s (84x84 grayscale, frame skip 4 with the max of the
last two frames, up to 30 no-op starts, v5's sticky actions with probability 0.25, no
FIRE on reset, no reward clipping, optionally a terminal on each life lost, episodes cut
at 27,000 env steps as ALE v5's 108,000 frames); the emulator's frames and random draws
are envpool's, not ale-py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from r2d2_agent.envs.atari import ATARI_FRAME_SHAPE

__all__ = ["EnvPoolAtari", "EnvPoolVectorEnv", "envpool_task_id"]

INSTALL_HINT = 'envpool is not installed: pip install "r2d2-agent[envpool]"'


def envpool_task_id(env_id: str) -> str:
    """envpool's name of an ALE game: `"ALE/Breakout-v5"` -> `"Breakout-v5"`.

    Raises:
        ValueError: If the game is not a v5 ALE id (envpool has v5 games only).
    """
    task = env_id.removeprefix("ALE/")
    if not task.endswith("-v5") or "/" in task:
        raise ValueError(f"envpool steps ALE v5 games such as 'ALE/Breakout-v5', got {env_id!r}")
    return task


@dataclass(frozen=True)
class EnvPoolAtari:
    """A picklable factory of `num_envs` Atari games stepped by envpool (one actor's envs).

    Attributes:
        env_id: The game, `"ALE/Breakout-v5"` (or envpool's `"Breakout-v5"`).
        num_envs: Envs in the batch: the config's `envs_per_actor`.
        terminal_on_life_loss: End an episode when a life is lost (`make_atari`'s option).
        num_threads: envpool's C++ threads stepping the batch; 1 keeps an actor on its one
            core (the manager runs one actor process per core).
        seed: Seed of the first env when the pool is first reset without a seed (env `j`
            uses `seed + j`); a seeded reset (as actors do) takes its own.
    """

    env_id: str
    num_envs: int
    terminal_on_life_loss: bool = False
    num_threads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        envpool_task_id(self.env_id)
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")
        if self.num_threads < 0:
            raise ValueError(
                f"num_threads must be >= 0 (0: envpool's choice), got {self.num_threads}"
            )

    def options(self, seed: int) -> dict[str, Any]:
        """`envpool.make`'s keyword arguments for a pool seeded `seed`."""
        return {
            "env_type": "gymnasium",
            "num_envs": self.num_envs,
            "batch_size": self.num_envs,
            "num_threads": self.num_threads,
            "seed": seed,
            "stack_num": 1,
            "frame_skip": 4,
            "noop_max": 30,
            "img_height": ATARI_FRAME_SHAPE[0],
            "img_width": ATARI_FRAME_SHAPE[1],
            "gray_scale": True,
            "episodic_life": self.terminal_on_life_loss,
            "reward_clip": False,
            "repeat_action_probability": 0.25,
            "use_fire_reset": False,
            "max_episode_steps": 27_000,
        }

    def __call__(self) -> EnvPoolVectorEnv:
        """A new vector env of `num_envs` games (the pool itself is made at its first
        reset).

        Raises:
            ImportError: Without envpool (the message says what to install).
        """
        return EnvPoolVectorEnv(self)


class EnvPoolVectorEnv(gymnasium.vector.VectorEnv):
    """envpool's N Atari games as a Gymnasium `VectorEnv` with `(84, 84)` frames and
    Gymnasium's reset semantics (see the module docstring). Autoreset: `NEXT_STEP`, as
    envpool (an actor resets an ended env itself, with `reset_mask`).

    Args:
        factory: What to make.

    Raises:
        ImportError: Without envpool.
    """

    metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, factory: EnvPoolAtari) -> None:
        try:
            import envpool
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
        self._envpool = envpool
        self.factory = factory
        self._task = envpool_task_id(factory.env_id)
        spec = envpool.make_spec(self._task, **_spec_options(factory.options(factory.seed)))
        self.num_envs = factory.num_envs
        self.single_observation_space = gymnasium.spaces.Box(0, 255, ATARI_FRAME_SHAPE, np.uint8)
        self.single_action_space = spec.gymnasium_action_space
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gymnasium.vector.utils.batch_space(
            self.single_action_space, self.num_envs
        )
        self._pool: Any = None
        self._frames = np.zeros(self.observation_space.shape, np.uint8)

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets all envs, or those of `options["reset_mask"]`; returns all N frames
        (the others' latest) and envpool's info of the reset envs.

        Args:
            seed: Env 0's seed (env `j` gets `seed + j`), or the N seeds, which must
                follow on from each other as envpool seeds them; makes the pool anew.
            options: `{"reset_mask": (N,) bool}` to reset some envs only.

        Raises:
            ValueError: On seeds that do not follow on from each other, or a seed
                together with a `reset_mask`.
        """
        mask = None if options is None else options.get("reset_mask")
        if seed is not None:
            if mask is not None:
                raise ValueError("a seeded reset resets all envs: give no reset_mask with it")
            self._make(_first_seed(seed, self.num_envs))
        elif self._pool is None:
            self._make(self.factory.seed)
        if mask is None:
            frames, info = self._pool.reset()
            self._frames[:] = frames[:, 0]
            return self._frames.copy(), info
        mask = np.asarray(mask, bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {mask.shape}")
        frames, info = self._pool.reset(np.flatnonzero(mask).astype(np.int32))
        self._frames[np.asarray(info["env_id"])] = frames[:, 0]
        return self._frames.copy(), info

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps all N envs (see Gymnasium's `VectorEnv.step`)."""
        if self._pool is None:
            raise RuntimeError("reset() the env before step()")
        frames, rewards, terminated, truncated, info = self._pool.step(
            np.asarray(actions, np.int32)
        )
        self._frames[:] = frames[:, 0]
        return self._frames.copy(), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Closes the pool (Gymnasium's `close` calls it once, then sets `closed`)."""
        self._close_pool()

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _make(self, seed: int) -> None:
        """Makes the pool anew, seeded `seed` (env `j`: `seed + j`)."""
        if self.closed:
            raise RuntimeError("this EnvPoolVectorEnv is closed; make a new one")
        self._close_pool()
        self._pool = self._envpool.make(self._task, **self.factory.options(seed))


def _spec_options(options: dict[str, Any]) -> dict[str, Any]:
    """`envpool.make_spec`'s keyword arguments (`make`'s without the env type)."""
    return {key: value for key, value in options.items() if key != "env_type"}


def _first_seed(seed: int | Sequence[int], num_envs: int) -> int:
    """Env 0's seed from a seed or N seeds that follow on from each other."""
    if isinstance(seed, (int, np.integer)):
        return int(seed)
    seeds = [int(s) for s in seed]
    if not seeds or seeds != list(range(seeds[0], seeds[0] + num_envs)):
        raise ValueError(
            f"envpool seeds env j with seed + j: give one seed or {num_envs} seeds that "
            f"follow on from each other, got {list(seed)!r}"
        )
    return seeds[0]
