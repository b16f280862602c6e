"""Sequence priorities and importance-sampling weights of prioritized replay.

Proportional prioritized replay (Schaul et al. 2016) samples item `i` with probability
`P(i) = p_i^alpha / sum_k p_k^alpha` and corrects the bias with the weights
`w_i = (N P(i))^-beta / max_j w_j`. R2D2 rates a sequence by its TD errors mixed between
their maximum and their mean (Kapturowski et al. 2019).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["importance_weights", "sequence_priorities"]


def sequence_priorities(td: ArrayLike, mask: ArrayLike, eta: float = 0.9) -> np.ndarray:
    """Sequence priorities `p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|`.

    Max and mean run over the valid steps only (`mask != 0`) along the last axis; a row
    with no valid step gets priority 0.

    Args:
        td: TD errors, shape `(B, L)` (any leading shape works).
        mask: Validity of each step, same shape as `td`.
        eta: Mixing weight in `[0, 1]`.

    Returns:
        float64 priorities of shape `(B,)`.

    Raises:
        ValueError: If the shapes differ or `eta` is outside `[0, 1]`.
    """
    d = np.abs(np.asarray(td, dtype=np.float64))
    m = np.asarray(mask) != 0
    if d.shape != m.shape:
        raise ValueError(f"td shape {d.shape} != mask shape {m.shape}")
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta must be in [0, 1], got {eta!r}")
    d = np.where(m, d, 0.0)
    count = m.sum(axis=-1)
    peak = d.max(axis=-1, initial=0.0)
    mean = d.sum(axis=-1) / np.maximum(count, 1)
    return eta * peak + (1.0 - eta) * mean


def importance_weights(probabilities: ArrayLike, size: int, beta: float) -> np.ndarray:
    """Normalised importance-sampling weights of a sampled batch.

    `w_i = (N P(i))^-beta / max_j (N P(j))^-beta`, so the largest weight in the batch is 1.
    Computed as `(P(i) / min_j P(j))^-beta`, which is identical (`N` cancels) and cannot
    overflow for tiny probabilities.

    Args:
        probabilities: Sampling probabilities `P(i)` of the batch, all > 0.
        size: `N`, the number of items in the replay, at least 1.
        beta: Exponent `beta >= 0` (annealed towards 1 or kept fixed).

    Returns:
        float64 weights with the shape of `probabilities`.

    Raises:
        ValueError: On non-positive probabilities, `size < 1` or `beta < 0`.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if p.size == 0:
        return p.copy()
    if not np.all(p > 0.0) or not np.all(np.isfinite(p)):
        raise ValueError(f"probabilities must be positive and finite, got min {p.min()!r}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size!r}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    return (p / p.min()) ** (-float(beta))
