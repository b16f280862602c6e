"""The adder of an actor's N envs: `VectorAdder`, and which implementation to use.

`R2D2VectorActor` hands the N transitions of a step to one adder (`VectorAdder`). Two
implementations give the same records bit for bit (`tests/test_vector_adder.py`):

* `PerEnvAdders`: one `SequenceAdder` per env, called env after env; a window costs
  about 30 us of Python at CartPole size, a step a few us per env;
* `VectorSequenceAdder`: the N envs in arrays; a step and the windows due at it cost a
  fixed 0.1-0.3 ms of array operations however many envs there are.

Below `BATCHED_FROM_ENVS` envs the first is faster (one actor of 1 or 4 CartPole envs made
about a third fewer env steps per CPU second with the arrays, 16 the same, 64 1.5x more:
`benchmarks/RESULTS.md`, stop 42); `make_env_adders` picks by N.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from r2d2_agent.replay.adder import SequenceAdder, Sink
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.vector_adder import VectorSequenceAdder

__all__ = ["BATCHED_FROM_ENVS", "PerEnvAdders", "VectorAdder", "add_env_step", "make_env_adders"]

BATCHED_FROM_ENVS = 32
"""Envs per actor from which `make_env_adders` keeps them in arrays."""


class VectorAdder(Protocol):
    """What `R2D2VectorActor` needs of its adder (see `VectorSequenceAdder`)."""

    num_envs: int

    def reset(self, env: int) -> None:
        """Drops env `env`'s episode in progress."""
        ...

    def add_first(self, env: int, frame: np.ndarray) -> None:
        """Starts an episode of env `env`."""
        ...

    def add(
        self,
        actions: Sequence[int] | np.ndarray,
        rewards: Sequence[float] | np.ndarray,
        next_frames: Sequence[np.ndarray] | np.ndarray,
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
        states: np.ndarray | None,
        q_values: np.ndarray,
        next_q_values: dict[int, np.ndarray] | None = None,
    ) -> None:
        """Records the transitions of all N envs (one step)."""
        ...


class PerEnvAdders:
    """N `SequenceAdder`s behind `VectorAdder`'s interface, env `j`'s records to
    `sinks[j]`.

    Args:
        sinks: One sink per env.
        layout: The sequence layout.
        **options: `SequenceAdder`'s keyword arguments (gamma, priority_eta, ...).

    Raises:
        ValueError: If there is no sink, or as `SequenceAdder` does.
    """

    def __init__(self, sinks: Sequence[Sink], layout: SequenceLayout, **options: Any) -> None:
        if not sinks:
            raise ValueError("PerEnvAdders needs at least one sink (one per env)")
        self.layout = layout
        self.adders = [SequenceAdder(sink, layout, **options) for sink in sinks]
        self.num_envs = len(self.adders)

    def reset(self, env: int) -> None:
        """See `SequenceAdder.reset`."""
        self.adders[env].reset()

    def add_first(self, env: int, frame: np.ndarray) -> None:
        """See `SequenceAdder.add_first`."""
        self.adders[env].add_first(frame)

    def add(
        self,
        actions: Sequence[int] | np.ndarray,
        rewards: Sequence[float] | np.ndarray,
        next_frames: Sequence[np.ndarray] | np.ndarray,
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
        states: np.ndarray | None,
        q_values: np.ndarray,
        next_q_values: dict[int, np.ndarray] | None = None,
    ) -> None:
        """See `VectorSequenceAdder.add`; each env's transition goes to its adder."""
        n = self.num_envs
        if len(actions) != n:
            raise ValueError(f"actions must be {n} integers, got {actions!r}")
        step = (actions, rewards, next_frames, terminated, truncated, states, q_values)
        for j, adder in enumerate(self.adders):
            add_env_step(adder, j, *step, next_q_values or {})


def add_env_step(
    adder: Any,
    env: int,
    actions: Sequence[int] | np.ndarray,
    rewards: Sequence[float] | np.ndarray,
    next_frames: Sequence[np.ndarray] | np.ndarray,
    terminated: Sequence[bool] | np.ndarray,
    truncated: Sequence[bool] | np.ndarray,
    states: np.ndarray | None,
    q_values: np.ndarray,
    next_q_values: dict[int, np.ndarray],
) -> None:
    """Hands env `env`'s transition of a step of N envs (`VectorAdder.add`'s arguments)
    to a single env's adder (`SequenceAdder.add`)."""
    adder.add(
        int(actions[env]),
        float(rewards[env]),
        next_frames[env],
        bool(terminated[env]),
        bool(truncated[env]),
        None if states is None else states[env],
        q_values[env],
        next_q_values.get(env),
    )


def make_env_adders(
    sinks: Sequence[Sink],
    layout: SequenceLayout,
    *,
    batched: bool | None = None,
    **options: Any,
) -> PerEnvAdders | VectorSequenceAdder:
    """The adder of `len(sinks)` envs (the same records either way).

    Args:
        sinks: One sink per env.
        layout: The sequence layout.
        batched: `VectorSequenceAdder` (True) or `PerEnvAdders` (False); None: the faster
            for this many envs (arrays from `BATCHED_FROM_ENVS` envs on).
        **options: The adders' keyword arguments (gamma, priority_eta, rescaling, ...).
    """
    sinks = list(sinks)
    if batched is None:
        batched = len(sinks) >= BATCHED_FROM_ENVS
    if batched:
        return VectorSequenceAdder(sinks, layout, **options)
    return PerEnvAdders(sinks, layout, **options)
