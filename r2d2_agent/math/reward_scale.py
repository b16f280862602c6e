"""The reward scale of `normalize_rewards`: the root mean square of every reward seen.

With `R2D2Config.normalize_rewards`, the learner divides rewards (the n-step returns and
the previous-reward input) by `sqrt(E[r^2])` over all rewards received so far, so the
network's Q-values and TD errors do not depend on the reward's units: the same task with
rewards multiplied by 0.01 or 100 gives the same updates. The statistics are a count and
a mean of squares, merged chunk by chunk (each actor's sequences bring the moments of
the rewards they add) with `merge_reward_moments`, and turned into a scale with
`reward_scale`.

The root mean square, not the standard deviation: a task whose every reward is 0.5 has
a standard deviation of 0 but a scale of 0.5, and the sign of the rewards (a reward's
offset from zero matters to a return) is kept.
"""

from __future__ import annotations

import math

__all__ = ["REWARD_SCALE_EPS", "check_reward_moments", "merge_reward_moments", "reward_scale"]

REWARD_SCALE_EPS = 1e-8
"""Below this root mean square the rewards are taken as all zero, and the scale is 1."""


def reward_scale(count: float, mean_square: float, eps: float = REWARD_SCALE_EPS) -> float:
    """The scale rewards are divided by: `sqrt(mean_square)`, or 1 when there is nothing
    to measure (no reward yet, or all rewards zero: a root mean square of at most `eps`).

    Args:
        count: Rewards seen, >= 0.
        mean_square: Their mean of squares `E[r^2]`, >= 0.
        eps: The root mean square at or below which the scale is 1.

    Returns:
        The scale, > 0.

    Raises:
        ValueError: On a negative or non-finite count or mean square.
    """
    check_reward_moments(count, mean_square)
    rms = math.sqrt(mean_square)
    return rms if count > 0 and rms > eps else 1.0


def merge_reward_moments(
    count_a: float, mean_square_a: float, count_b: float, mean_square_b: float
) -> tuple[float, float]:
    """The moments of two sets of rewards together.

    `mean_square = (count_a * ms_a + count_b * ms_b) / (count_a + count_b)`, written as a
    weighted step from `ms_a` so that a long history merged with small chunks keeps its
    precision.

    Args:
        count_a: Rewards in the first set, >= 0.
        mean_square_a: Their mean of squares, >= 0 (ignored when `count_a` is 0).
        count_b: Rewards in the second set, >= 0.
        mean_square_b: Their mean of squares, >= 0 (ignored when `count_b` is 0).

    Returns:
        `(count, mean_square)` of the union; `(0.0, 0.0)` when both are empty.

    Raises:
        ValueError: On a negative or non-finite count or mean square.
    """
    check_reward_moments(count_a, mean_square_a)
    check_reward_moments(count_b, mean_square_b)
    count = float(count_a) + float(count_b)
    if count == 0:
        return 0.0, 0.0
    if count_a == 0:
        return count, float(mean_square_b)
    mean_square = float(mean_square_a) + (mean_square_b - mean_square_a) * (count_b / count)
    return count, max(mean_square, 0.0)


def check_reward_moments(count: float, mean_square: float) -> None:
    """Refuses moments `merge_reward_moments` and `reward_scale` cannot take.

    Args:
        count: Rewards counted.
        mean_square: Their mean of squares.

    Raises:
        ValueError: On a negative or non-finite count or mean square (naming it).
    """
    if not (math.isfinite(count) and count >= 0):
        raise ValueError(f"a reward count must be finite and >= 0, got {count!r}")
    if not (math.isfinite(mean_square) and mean_square >= 0):
        raise ValueError(f"a mean square of rewards must be finite and >= 0, got {mean_square!r}")
