"""The learner's loss math in TensorFlow, for use inside a compiled graph.

Each function mirrors a numpy reference in `r2d2_agent.targets` (the tests check they
agree); the numpy versions serve actors (initial priorities) and the tests.
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.compat import tf
from r2d2_agent.targets import RESCALE_EPS


def rescale(x: Any) -> Any:
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + εx.

    Written as sign(x)·|x| / (sqrt(|x| + 1) + 1) + εx, which is the same function without
    the cancellation of sqrt(|x| + 1) - 1 near 0 in float32.
    """
    a = tf.abs(x)
    return tf.sign(x) * a / (tf.sqrt(a + 1.0) + 1.0) + RESCALE_EPS * x


def inverse_rescale(x: Any) -> Any:
    """h⁻¹(x) = sign(x)(((sqrt(1 + 4ε(|x| + 1 + ε)) - 1) / (2ε))² - 1).

    Computed as sign(x)·d(d + 2) with d = 2|x| / (1 + 2ε + sqrt((1 + 2ε)² + 4ε|x|)),
    algebraically identical but free of the division by 2ε that costs float32 its
    precision (the numpy reference in `targets.py` uses the same form).
    """
    eps = RESCALE_EPS
    a = tf.abs(x)
    b = 1.0 + 2.0 * eps
    d = 2.0 * a / (b + tf.sqrt(b * b + 4.0 * eps * a))
    return tf.sign(x) * d * (d + 2.0)


def n_step_targets(returns: Any, bootstrap_discount: Any, q_online: Any, q_target: Any,
                   double_q: bool, rescaling: bool) -> Any:
    """y = h(R + disc · h⁻¹(Q_target(s', argmax_a Q_online(s', a)))).

    Args:
        returns: (B, L) n-step discounted reward sums, in return units.
        bootstrap_discount: (B, L) γ^K, or 0 where the episode terminated.
        q_online: (B, L, A) online Q-values at the bootstrap observations.
        q_target: (B, L, A) target Q-values at the bootstrap observations.
        double_q: pick the action with the online net (else max of the target net).
        rescaling: apply h and h⁻¹ (else the identity).

    Returns:
        (B, L) targets in the network's units.
    """
    if double_q:
        best = tf.argmax(q_online, axis=-1, output_type=tf.int32)
        q_next = tf.gather(q_target, best, batch_dims=2)
    else:
        q_next = tf.reduce_max(q_target, axis=-1)
    if rescaling:
        return rescale(returns + bootstrap_discount * inverse_rescale(q_next))
    return returns + bootstrap_discount * q_next


def sequence_priorities(td: Any, mask: Any, eta: float) -> Any:
    """p = η · max_t |δ_t| + (1 - η) · mean_t |δ_t| over the valid steps of each row."""
    abs_td = tf.abs(td) * mask
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    return eta * tf.reduce_max(abs_td, axis=1) + (1.0 - eta) * tf.reduce_sum(abs_td, 1) / count


def sequence_loss(td: Any, mask: Any, weights: Any, kind: str) -> Any:
    """mean_i w_i · mean_t ℓ(δ_it) over valid steps, ℓ = Huber(δ, 1) or δ²/2.

    The importance-sampling weights scale each sequence's loss (not its targets).
    """
    abs_td = tf.abs(td)
    if kind == "huber":
        per_step = tf.where(abs_td <= 1.0, 0.5 * tf.square(td), abs_td - 0.5)
    else:
        per_step = 0.5 * tf.square(td)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    per_seq = tf.reduce_sum(per_step * mask, axis=1) / count
    return tf.reduce_mean(weights * per_seq)
