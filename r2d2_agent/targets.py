"""R2D2 target and priority math as pure numpy functions.

Everything here is framework-free so that it can be tested exactly and shared
by the actors (initial priorities), the sequence adder and the learner.

Notation: ``h`` is the invertible value rescaling of Pohlen et al. (2018) used
by R2D2, ``gamma`` the discount, ``n`` the number of multi-steps and ``eta``
the max/mean mixing of sequence priorities (Kapturowski et al., 2019).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "RESCALE_EPS", "apex_epsilon", "importance_weights", "inverse_rescale", "linear_schedule",
    "n_step_returns", "n_step_targets", "rescale", "sequence_priorities", "td_errors",
]

RESCALE_EPS: float = 1e-3
"""The ``epsilon`` of the value rescaling ``h`` (R2D2 uses 1e-3)."""


def _float_array(x: ArrayLike) -> np.ndarray:
    """Returns ``x`` as a floating array, keeping float32/float64 as given."""
    a = np.asarray(x)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float64)


def rescale(x: ArrayLike) -> np.ndarray:
    """Value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``.

    ``sqrt(|x| + 1) - 1`` is evaluated as ``|x| / (sqrt(|x| + 1) + 1)`` to avoid
    cancellation near 0. The floating dtype of ``x`` is kept (ints -> float64).

    Args:
        x: Values in the original (reward) scale; array or scalar.

    Returns:
        ``h(x)`` with the shape of ``x``.
    """
    x = _float_array(x)
    a = np.abs(x)
    return np.sign(x) * (a / (np.sqrt(a + 1) + 1)) + x.dtype.type(RESCALE_EPS) * x


def inverse_rescale(x: ArrayLike) -> np.ndarray:
    """Exact inverse of :func:`rescale`.

    ``h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``.

    Evaluated in the algebraically identical, cancellation-free form
    ``d = 2|x| / ((1 + 2 eps) + sqrt((1 + 2 eps)^2 + 4 eps |x|))`` (``d`` is
    ``sqrt(|h^-1(x)| + 1) - 1``, the positive root of ``eps d^2 + (1 + 2 eps) d
    = |x|``), then ``h^-1(x) = sign(x) d (d + 2)``. The floating dtype of ``x``
    is kept (ints -> float64).

    Args:
        x: Values in the rescaled space; array or scalar.

    Returns:
        ``h^-1(x)`` with the shape of ``x``.
    """
    x = _float_array(x)
    eps = x.dtype.type(RESCALE_EPS)
    a = np.abs(x)
    b = 1 + 2 * eps
    d = 2 * a / (b + np.sqrt(b * b + 4 * eps * a))
    return np.sign(x) * d * (d + 2)


def n_step_returns(
    rewards: ArrayLike,
    terminated: bool,
    truncated: bool,
    gamma: float,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truncated n-step returns of one episode (or episode segment).

    ``rewards[t]`` is ``r_t``, received after acting in ``s_t``; the segment
    holds ``T`` steps and its last observation is ``s_T``. With
    ``K_t = min(n, T - t)`` steps available after ``t``:

    * ``returns[t] = sum_{k=0}^{K_t-1} gamma^k r_{t+k}``
    * ``bootstrap_offset[t] = K_t`` (the bootstrap observation is ``s_{t+K_t}``)
    * ``bootstrap_discount[t] = 0`` if ``terminated`` and ``t + K_t == T``
      (the episode ended inside the window), else ``gamma^{K_t}``.

    Truncation and a segment that simply stops (both flags False) are the same
    for this math: windows that run past the end are shortened to the steps
    available and bootstrap from the last observation ``s_T`` with
    ``gamma^{K_t}`` (a valid, shorter multi-step target). Callers that need
    full ``n``-step windows mid-episode (the sequence adder) pass enough
    look-ahead and use only the leading ``T - n + 1`` entries. If both flags
    are set (Gymnasium allows it), termination wins.

    Args:
        rewards: Shape ``(T,)``; ``T`` may be 0.
        terminated: Whether the episode terminated (reached an absorbing state)
            right after the last step.
        truncated: Whether the episode was cut off after the last step.
        gamma: Discount in ``[0, 1]``.
        n: Number of multi-steps, at least 1.

    Returns:
        ``(returns, bootstrap_discount, bootstrap_offset)``: float64, float64
        and int64 arrays of shape ``(T,)``.

    Raises:
        ValueError: On non-1-D rewards, ``gamma`` outside ``[0, 1]`` or ``n < 1``.
    """
    del truncated  # Same math as a continuing segment; see the docstring.
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D, got shape {r.shape}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    n = int(n)
    size = r.shape[0]
    offset = np.minimum(n, size - np.arange(size, dtype=np.int64))
    returns = np.zeros(size, dtype=np.float64)
    for k in range(min(n, size)):
        returns[: size - k] += gamma**k * r[k:]
    discount = np.power(float(gamma), offset).astype(np.float64)
    if terminated:
        discount[np.arange(size) + offset == size] = 0.0
    return returns, discount, offset


def n_step_targets(
    returns: ArrayLike,
    bootstrap_discount: ArrayLike,
    q_bootstrap_online: ArrayLike,
    q_bootstrap_target: ArrayLike,
    double_q: bool = True,
    rescaling: bool = True,
) -> np.ndarray:
    """Bootstrapped n-step targets with optional double Q and value rescaling.

    ``y = h(G + D h^-1(Q_target(s', a*)))`` with ``a* = argmax_a Q_online(s', a)``
    when ``double_q``, else ``a* = argmax_a Q_target(s', a)`` (i.e. the max of
    the target network). Without ``rescaling``, ``h`` is the identity. Where
    ``D == 0`` the bootstrap term is exactly 0 (even for non-finite q values).

    Args:
        returns: n-step returns ``G``, shape ``S``.
        bootstrap_discount: ``D``, shape ``S``.
        q_bootstrap_online: Online network ``Q(s', .)``, shape ``(*S, A)``.
        q_bootstrap_target: Target network ``Q(s', .)``, shape ``(*S, A)``.
        double_q: Select the bootstrap action with the online network.
        rescaling: Whether the q values live in the rescaled space.

    Returns:
        Targets ``y`` of shape ``S``, in the network's output space.
    """
    g = np.asarray(returns, dtype=np.float64)
    disc = np.asarray(bootstrap_discount, dtype=np.float64)
    q_target = np.asarray(q_bootstrap_target, dtype=np.float64)
    if double_q:
        a_star = np.argmax(np.asarray(q_bootstrap_online), axis=-1)
        q_next = np.take_along_axis(q_target, a_star[..., None], axis=-1)[..., 0]
    else:
        q_next = np.max(q_target, axis=-1)
    if rescaling:
        q_next = inverse_rescale(q_next)
    with np.errstate(invalid="ignore"):
        bootstrap = np.where(disc != 0.0, disc * q_next, 0.0)
    y = g + bootstrap
    return rescale(y) if rescaling else y


def td_errors(targets: ArrayLike, q_taken: ArrayLike) -> np.ndarray:
    """TD errors ``delta = y - Q(s, a)`` (both in the network's output space).

    Args:
        targets: ``y``.
        q_taken: ``Q(s, a)`` of the actions taken, broadcastable to ``y``.

    Returns:
        ``y - Q(s, a)``.
    """
    return np.asarray(targets) - np.asarray(q_taken)


def sequence_priorities(td: ArrayLike, mask: ArrayLike, eta: float = 0.9) -> np.ndarray:
    """Sequence priorities ``p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|``.

    Max and mean run over the valid steps only (``mask != 0``) along the last
    axis; a row with no valid step gets priority 0.

    Args:
        td: TD errors, shape ``(B, L)`` (any leading shape works).
        mask: Validity of each step, same shape as ``td``.
        eta: Mixing weight in ``[0, 1]``.

    Returns:
        float64 priorities of shape ``(B,)``.

    Raises:
        ValueError: If shapes differ or ``eta`` is outside ``[0, 1]``.
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

    ``w_i = (N P(i))^-beta / max_j (N P(j))^-beta`` so the largest weight is 1.
    Computed as ``(P(i) / min_j P(j))^-beta``, which is identical (``N``
    cancels) and cannot overflow for tiny probabilities.

    Args:
        probabilities: Sampling probabilities ``P(i)`` of the batch, all > 0.
        size: ``N``, the number of items in the replay, at least 1.
        beta: Exponent ``beta >= 0`` (annealed towards 1).

    Returns:
        float64 weights with the shape of ``probabilities``.

    Raises:
        ValueError: On non-positive probabilities, ``size < 1`` or ``beta < 0``.
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


def linear_schedule(start: float, end: float, duration: int, t: float) -> float:
    """Linear interpolation from ``start`` (at ``t <= 0``) to ``end`` (at ``t >= duration``).

    ``value = start + (end - start) min(max(t / duration, 0), 1)``; with
    ``duration == 0`` the value is ``end`` for every ``t >= 0``.

    Args:
        start: Value at step 0 (e.g. ``beta_0``).
        end: Value from step ``duration`` on (e.g. 1).
        duration: Number of steps of the ramp, at least 0.
        t: Current step.

    Returns:
        The scheduled value.

    Raises:
        ValueError: If ``duration < 0``.
    """
    if duration < 0:
        raise ValueError(f"duration must be >= 0, got {duration!r}")
    if duration == 0:
        return float(end) if t >= 0 else float(start)
    frac = min(max(float(t) / duration, 0.0), 1.0)
    return float(start + (end - start) * frac)


def apex_epsilon(index: int, num_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> float:
    """Per-actor exploration ``eps_i = epsilon^(1 + alpha i / (N - 1))`` (Ape-X).

    With a single actor (``N == 1``) the result is ``epsilon``.

    Args:
        index: Actor index ``i`` in ``[0, N)``.
        num_actors: ``N``, at least 1.
        epsilon: Base epsilon.
        alpha: Spread exponent.

    Returns:
        The actor's epsilon.

    Raises:
        ValueError: If ``num_actors < 1`` or ``index`` is outside ``[0, N)``.
    """
    if num_actors < 1:
        raise ValueError(f"num_actors must be >= 1, got {num_actors!r}")
    if not 0 <= index < num_actors:
        raise ValueError(f"index must be in [0, {num_actors}), got {index!r}")
    if num_actors == 1:
        return float(epsilon)
    return float(epsilon ** (1.0 + alpha * index / (num_actors - 1)))
