"""n-step returns and double-Q targets, as pure numpy functions.

Notation: `gamma` is the discount, `n` the number of multi-steps, `h` the value rescaling
of `r2d2_agent.math.rescaling`. The target of step `t` is

    y_t = h(G_t + D_t h^-1(Q_target(s_{t+K}, argmax_a Q_online(s_{t+K}, a)))),
    G_t = sum_{k<K} gamma^k r_{t+k}

with `K = min(n, steps left in the episode)`, `D_t = 0` if the episode terminated within
those `K` steps and `gamma^K` otherwise (a time limit bootstraps from the last state).
With advantage learning (Bellemare et al. 2016) the target inside `h` is lowered by
`alpha * gap_t`, where `gap_t = max_b Q(s_t, b) - Q(s_t, a_t)` in return units
(`action_gaps`; the target network's values).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from r2d2_agent.math.rescaling import inverse_rescale, rescale

__all__ = ["action_gaps", "n_step_returns", "n_step_targets", "td_errors"]


def n_step_returns(
    rewards: ArrayLike,
    terminated: bool,
    truncated: bool,
    gamma: float,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truncated n-step returns of one episode (or episode segment).

    `rewards[t]` is `r_t`, received after acting in `s_t`; the segment holds `T` steps and
    its last observation is `s_T`. With `K_t = min(n, T - t)` steps available after `t`:

    * `returns[t] = sum_{k=0}^{K_t-1} gamma^k r_{t+k}` (the oldest reward has weight 1);
    * `bootstrap_offset[t] = K_t` (the bootstrap observation is `s_{t+K_t}`);
    * `bootstrap_discount[t] = 0` if `terminated` and `t + K_t == T` (the episode ended
      inside the window), else `gamma^{K_t}`.

    A truncated episode (a time limit) and a segment that simply stops are the same for
    this math: windows that run past the end are shortened to the steps available and
    bootstrap from the last observation `s_T` with `gamma^{K_t}`. Callers that need full
    `n`-step windows mid-episode (the sequence adder) pass enough look-ahead and use only
    the leading `T - n + 1` entries.

    Args:
        rewards: Shape `(T,)`; `T` may be 0.
        terminated: Whether the episode reached an absorbing state right after the last
            step. If both flags are set (Gymnasium allows it), termination wins.
        truncated: Whether the episode was cut off (a time limit) after the last step. It
            is the same math as a segment that stops without either flag; the argument
            makes call sites say which case they are in.
        gamma: Discount in `[0, 1]`.
        n: Number of multi-steps, at least 1.

    Returns:
        `(returns, bootstrap_discount, bootstrap_offset)`: float64, float64 and int64
        arrays of shape `(T,)`.

    Raises:
        ValueError: On non-1-D rewards, `gamma` outside `[0, 1]` or `n < 1`.
    """
    del truncated  # bootstraps exactly like a continuing segment (see above)
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
    correction: ArrayLike | None = None,
) -> np.ndarray:
    """Bootstrapped n-step targets with optional double Q and value rescaling.

    `y = h(G + D h^-1(Q_target(s', a*)) - c)` with `a* = argmax_a Q_online(s', a)` when
    `double_q`, else `a* = argmax_a Q_target(s', a)` (the max of the target network).
    Without `rescaling`, `h` is the identity. Where `D == 0` the bootstrap term is exactly
    0, even for non-finite Q-values.

    Args:
        returns: N-step returns `G`, shape `S`.
        bootstrap_discount: `D`, shape `S`.
        q_bootstrap_online: Online network `Q(s', .)`, shape `(*S, A)`.
        q_bootstrap_target: Target network `Q(s', .)`, shape `(*S, A)`.
        double_q: Select the bootstrap action with the online network.
        rescaling: Whether the Q-values live in the rescaled space.
        correction: `c`, subtracted in return units (shape `S`; advantage learning's
            `alpha * action_gaps(...)`); None for none.

    Returns:
        Targets `y` of shape `S`, in the network's output space.
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
    if correction is not None:
        y = y - np.asarray(correction, dtype=np.float64)
    return rescale(y) if rescaling else y


def action_gaps(q: ArrayLike, actions: ArrayLike, rescaling: bool = True) -> np.ndarray:
    """`max_b Q(s, b) - Q(s, a)` in return units: how far below the best action's value
    the taken action's is (0 for a greedy action).

    Args:
        q: `Q(s, .)`, shape `(*S, A)`, in the network's output space.
        actions: The actions `a`, shape `S`.
        rescaling: Whether the Q-values live in the rescaled space (`h^-1` brings them to
            return units first).

    Returns:
        The gaps, shape `S`, >= 0.
    """
    q = np.asarray(q, dtype=np.float64)
    taken = np.take_along_axis(q, np.asarray(actions)[..., None], axis=-1)[..., 0]
    best = np.max(q, axis=-1)
    if rescaling:
        best, taken = inverse_rescale(best), inverse_rescale(taken)
    return best - taken


def td_errors(targets: ArrayLike, q_taken: ArrayLike) -> np.ndarray:
    """TD errors `delta = y - Q(s, a)`, both in the network's output space.

    Args:
        targets: `y`.
        q_taken: `Q(s, a)` of the actions taken, broadcastable to `y`.

    Returns:
        `y - Q(s, a)`.
    """
    return np.asarray(targets) - np.asarray(q_taken)
