"""Lock-free state shared by the processes of one run: the stop flag, the counters and the
children's heartbeats.

All live in raw shared memory and every slot has exactly one writer: a process killed
while holding a multiprocessing lock (as `Event.is_set` takes one) would deadlock every
other process, so none is used.
"""

from __future__ import annotations

import ctypes
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

__all__ = ["LEARNER_FIELDS", "Heartbeats", "RunCounters", "SharedFlag"]

LEARNER_FIELDS = ("updates", "sequences", "env_steps", "version")
"""The learner's counters, in slot order: learner updates, sequences received, env steps
those sequences account for, latest published weights version."""


class SharedFlag:
    """A lock-free stop flag in shared memory (pass it as a Process argument).

    Args:
        ctx: The multiprocessing context of the run.
    """

    def __init__(self, ctx: BaseContext) -> None:
        self._value = ctx.RawValue(ctypes.c_int8, 0)

    def set(self) -> None:
        """Raises the flag."""
        self._value.value = 1

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return bool(self._value.value)


class RunCounters:
    """Lock-free shared counters of a run; every slot has exactly one writer.

    Actor `i` writes its own env-step and episode counts; the learner writes
    `LEARNER_FIELDS` and the latest loss; the parent only reads, except before any child
    starts, when it sets the counts a resumed run continues from.

    Args:
        ctx: The multiprocessing context of the run.
        nb_actors: Number of actor slots.
    """

    def __init__(self, ctx: BaseContext, nb_actors: int) -> None:
        self._actor_steps = ctx.RawArray(ctypes.c_int64, nb_actors)
        self._actor_episodes = ctx.RawArray(ctypes.c_int64, nb_actors)
        self._learner = ctx.RawArray(ctypes.c_int64, len(LEARNER_FIELDS))
        self._loss = ctx.RawValue(ctypes.c_double, float("nan"))
        self._steps_view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_steps_view": None}

    # Actors ----------------------------------------------------------------------------

    def actor_steps(self, index: int) -> int:
        """Env steps of actor `index` (over its restarts)."""
        return int(self._actor_steps[index])

    def set_actor_steps(self, index: int, steps: int) -> None:
        """Actor `index` only: its env steps so far."""
        self._actor_steps[index] = steps

    def all_actor_steps(self) -> list[int]:
        """Env steps per actor index."""
        return [int(s) for s in self._actor_steps]

    def actor_episodes(self, index: int) -> int:
        """Episodes finished by actor `index` (over its restarts)."""
        return int(self._actor_episodes[index])

    def set_actor_episodes(self, index: int, episodes: int) -> None:
        """Actor `index` only: its finished episodes so far."""
        self._actor_episodes[index] = episodes

    def all_actor_episodes(self) -> list[int]:
        """Finished episodes per actor index."""
        return [int(e) for e in self._actor_episodes]

    def total_steps(self) -> int:
        """Env steps summed over all actors."""
        if self._steps_view is None:
            self._steps_view = np.frombuffer(self._actor_steps, dtype=np.int64)
        return int(self._steps_view.sum())

    # Learner ---------------------------------------------------------------------------

    def learner_value(self, field: str) -> int:
        """One of `LEARNER_FIELDS`, as a Python int."""
        return int(self._learner[LEARNER_FIELDS.index(field)])

    def set_learner(self, *, loss: float | None = None, **values: int) -> None:
        """Learner only: sets some of `LEARNER_FIELDS` (and the latest loss).

        Raises:
            KeyError: For a name that is not in `LEARNER_FIELDS`.
        """
        for name, value in values.items():
            if name not in LEARNER_FIELDS:
                raise KeyError(f"{name!r} is not a learner counter; use one of {LEARNER_FIELDS}")
            self._learner[LEARNER_FIELDS.index(name)] = int(value)
        if loss is not None:
            self._loss.value = float(loss)

    @property
    def loss(self) -> float:
        """The learner's latest loss (NaN before the first update)."""
        return float(self._loss.value)


class Heartbeats:
    """Signs of life of a run's children, for the parent's stall watchdog: per child slot,
    a beat count and whether the child is inside a declared long operation.

    Child `slot` is the only writer of its slot while it runs (its main thread between
    steps, its keep-alive thread during long operations); the parent resets a slot before
    it starts a child there, and otherwise only reads.

    Args:
        ctx: The multiprocessing context of the run.
        nb_slots: Number of child slots (the learner's and one per actor).
    """

    def __init__(self, ctx: BaseContext, nb_slots: int) -> None:
        self._beats = ctx.RawArray(ctypes.c_int64, nb_slots)
        self._busy = ctx.RawArray(ctypes.c_int8, nb_slots)

    def reset(self, slot: int) -> None:
        """Parent only, before a child starts in `slot`: no beat, not busy."""
        self._beats[slot] = 0
        self._busy[slot] = 0

    def beat(self, slot: int) -> None:
        """A sign of life of the child in `slot`."""
        self._beats[slot] = self._beats[slot] + 1

    def beats(self, slot: int) -> int:
        """How many signs of life the child in `slot` gave (0: none yet)."""
        return int(self._beats[slot])

    def set_busy(self, slot: int, busy: bool) -> None:
        """The child in `slot` enters (True) or leaves (False) a long operation."""
        self._busy[slot] = 1 if busy else 0

    def busy(self, slot: int) -> bool:
        """Whether the child in `slot` is inside a declared long operation."""
        return bool(self._busy[slot])
