"""The learner's loss math in TensorFlow, for use inside a compiled graph.

Each function mirrors a numpy reference in `r2d2_agent.math` (the tests check that they
agree); the numpy versions serve the actors (initial priorities) and the tests.
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.compat import tf
from r2d2_agent.math.rescaling import RESCALE_EPS

__all__ = [
    "action_gaps",
    "inverse_rescale",
    "n_step_targets",
    "rescale",
    "sequence_loss",
    "sequence_priorities",
]


def rescale(x: Any) -> Any:
    """`h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`.

    Written as `sign(x) |x| / (sqrt(|x| + 1) + 1) + eps x`, which is the same function
    without the cancellation of `sqrt(|x| + 1) - 1` near 0 in float32.
    """
    a = tf.abs(x)
    return tf.sign(x) * a / (tf.sqrt(a + 1.0) + 1.0) + RESCALE_EPS * x


def inverse_rescale(x: Any) -> Any:
    """`h^-1(x) = sign(x)(((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)`.

    Computed as `sign(x) d (d + 2)` with `d = 2|x| / (1 + 2 eps + sqrt((1 + 2 eps)^2 +
    4 eps |x|))`: algebraically identical but free of the division by `2 eps` that costs
    float32 its precision (the numpy reference uses the same form).
    """
    eps = RESCALE_EPS
    a = tf.abs(x)
    b = 1.0 + 2.0 * eps
    d = 2.0 * a / (b + tf.sqrt(b * b + 4.0 * eps * a))
    return tf.sign(x) * d * (d + 2.0)


def n_step_targets(
    returns: Any,
    bootstrap_discount: Any,
    q_online: Any,
    q_target: Any,
    double_q: bool,
    rescaling: bool,
    correction: Any = None,
) -> Any:
    """`y = h(R + D h^-1(Q_target(s', argmax_a Q_online(s', a))) - c)`.

    Args:
        returns: `(B, L)` n-step discounted reward sums, in return units.
        bootstrap_discount: `(B, L)` `gamma^K`, or 0 where the episode terminated.
        q_online: `(B, L, A)` online Q-values at the bootstrap observations.
        q_target: `(B, L, A)` target Q-values at the bootstrap observations.
        double_q: Pick the action with the online net (else the max of the target net).
        rescaling: Apply `h` and `h^-1` (else the identity).
        correction: `(B, L)` `c`, subtracted in return units (advantage learning's
            `alpha * action_gaps(...)`); None for none.

    Returns:
        `(B, L)` targets in the network's units.
    """
    if double_q:
        best = tf.argmax(q_online, axis=-1, output_type=tf.int32)
        q_next = tf.gather(q_target, best, batch_dims=2)
    else:
        q_next = tf.reduce_max(q_target, axis=-1)
    if rescaling:
        q_next = inverse_rescale(q_next)
    y = returns + bootstrap_discount * q_next
    if correction is not None:
        y = y - correction
    return rescale(y) if rescaling else y


def action_gaps(q: Any, actions: Any, rescaling: bool) -> Any:
    """`max_b Q(s, b) - Q(s, a)` in return units, `(B, L)` from `q` `(B, L, A)` and
    `actions` `(B, L)`."""
    taken = tf.gather(q, actions, batch_dims=2)
    best = tf.reduce_max(q, axis=-1)
    if rescaling:
        best, taken = inverse_rescale(best), inverse_rescale(taken)
    return best - taken


def sequence_priorities(td: Any, mask: Any, eta: float) -> Any:
    """`p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|` over each row's valid steps."""
    abs_td = tf.abs(td) * mask
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    peak = tf.reduce_max(abs_td, axis=1)
    return eta * peak + (1.0 - eta) * tf.reduce_sum(abs_td, axis=1) / count


def sequence_loss(td: Any, mask: Any, weights: Any, kind: str) -> Any:
    """`mean_i w_i mean_t l(delta_it)` over valid steps, `l` = Huber(delta, 1) or `delta^2 / 2`.

    The importance-sampling weights scale each sequence's loss, never its targets.
    """
    abs_td = tf.abs(td)
    if kind == "huber":
        per_step = tf.where(abs_td <= 1.0, 0.5 * tf.square(td), abs_td - 0.5)
    else:
        per_step = 0.5 * tf.square(td)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    per_seq = tf.reduce_sum(per_step * mask, axis=1) / count
    return tf.reduce_mean(weights * per_seq)
