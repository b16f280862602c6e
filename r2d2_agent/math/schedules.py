"""Schedules: linear annealing (e.g. of the importance exponent) and Ape-X exploration."""

from __future__ import annotations

__all__ = ["annealed_epsilon", "apex_epsilon", "linear_schedule"]


def linear_schedule(start: float, end: float, duration: int, t: float) -> float:
    """Linear interpolation from `start` (at `t <= 0`) to `end` (at `t >= duration`).

    `value = start + (end - start) min(max(t / duration, 0), 1)`; with `duration == 0`
    the value is `end` for every `t >= 0`.

    Args:
        start: Value at step 0 (e.g. `beta_0`).
        end: Value from step `duration` on (e.g. 1).
        duration: Number of steps of the ramp, at least 0.
        t: Current step.

    Returns:
        The scheduled value.

    Raises:
        ValueError: If `duration < 0`.
    """
    if duration < 0:
        raise ValueError(f"duration must be >= 0, got {duration!r}")
    if duration == 0:
        return float(end) if t >= 0 else float(start)
    frac = min(max(float(t) / duration, 0.0), 1.0)
    return float(start + (end - start) * frac)


def apex_epsilon(index: int, nb_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> float:
    """Per-actor exploration `eps_i = epsilon^(1 + alpha i / (N - 1))` (Ape-X).

    With a single actor (`N == 1`) the result is `epsilon`.

    Args:
        index: Actor index `i` in `[0, N)`.
        nb_actors: `N`, at least 1.
        epsilon: Base epsilon.
        alpha: Spread exponent.

    Returns:
        The actor's epsilon.

    Raises:
        ValueError: If `nb_actors < 1` or `index` is outside `[0, N)`.
    """
    if nb_actors < 1:
        raise ValueError(f"nb_actors must be >= 1, got {nb_actors!r}")
    if not 0 <= index < nb_actors:
        raise ValueError(f"index must be in [0, {nb_actors}), got {index!r}")
    if nb_actors == 1:
        return float(epsilon)
    return float(epsilon ** (1.0 + alpha * index / (nb_actors - 1)))


def annealed_epsilon(start: float | None, final: float, anneal_steps: int, step: int) -> float:
    """An actor's exploration rate at its env step `step`: `start` annealed linearly to
    `final` over `anneal_steps` steps (DQN's schedule), `final` afterwards.

    Args:
        start: Rate at step 0; None means no ramp (always `final`).
        final: Rate from step `anneal_steps` on (e.g. the actor's Ape-X epsilon_i).
        anneal_steps: Length of the ramp in env steps, at least 0.
        step: The actor's env steps so far.

    Returns:
        The rate, in the interval between `start` and `final`.
    """
    if start is None:
        return float(final)
    return linear_schedule(start, final, anneal_steps, step)
