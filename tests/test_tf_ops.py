"""Tests of `r2d2_agent.math.tf_ops` (TensorFlow) against `r2d2_agent.math` (numpy) and by
hand.

The TensorFlow loss math runs inside the learner's compiled graph; the numpy versions are
the exactly-tested references. Both must agree to float32 precision, and the sequence loss
is checked against a small example worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent import math as np_math
from r2d2_agent.compat import tf
from r2d2_agent.math import tf_ops

RTOL, ATOL = 1e-5, 1e-4  # float32 arithmetic against a float64 reference, composite formulas
# h and h^-1 alone: float32 evaluates them to about 1e-7 relative error when written without
# cancellation (as `r2d2_agent.math` does), so 1e-5 relative (about 100 ulp) is generous.
H_RTOL, H_ATOL = 1e-5, 1e-6


def f32(x):
    return tf.constant(np.asarray(x, np.float32))


def wide_values(seed=0):
    """Values from 1e-6 to 1e4 in magnitude, both signs, and exact zero."""
    rng = np.random.default_rng(seed)
    mags = 10.0 ** rng.uniform(-6, 4, size=500)
    return np.concatenate([[0.0], mags, -mags]).astype(np.float32)


def test_tf_rescale_equals_numpy_rescale():
    x = wide_values()
    np.testing.assert_allclose(
        tf_ops.rescale(f32(x)).numpy(),
        np_math.rescale(x.astype(np.float64)),
        rtol=H_RTOL,
        atol=H_ATOL,
    )


def test_tf_inverse_rescale_equals_numpy_inverse_rescale():
    x = wide_values(1) / 50.0  # h(1e4) is about 110: cover the rescaled range and beyond
    np.testing.assert_allclose(
        tf_ops.inverse_rescale(f32(x)).numpy(),
        np_math.inverse_rescale(x.astype(np.float64)),
        rtol=H_RTOL,
        atol=H_ATOL,
    )


def test_tf_inverse_rescale_inverts_tf_rescale():
    x = np.linspace(-1e3, 1e3, 2001).astype(np.float32)
    back = tf_ops.inverse_rescale(tf_ops.rescale(f32(x))).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-3)


def random_target_inputs(seed, batch=3, length=5, actions=4):
    rng = np.random.default_rng(seed)
    returns = rng.normal(scale=5.0, size=(batch, length))
    discount = rng.choice([0.0, 0.9, 0.81, 0.997**5], size=(batch, length))
    q_online = rng.normal(scale=3.0, size=(batch, length, actions))
    q_target = rng.normal(scale=3.0, size=(batch, length, actions))
    return returns, discount, q_online, q_target


@pytest.mark.parametrize("rescaling", [True, False], ids=["rescaled", "plain"])
@pytest.mark.parametrize("double_q", [True, False], ids=["double", "max"])
def test_tf_n_step_targets_equal_numpy(double_q, rescaling):
    returns, discount, q_online, q_target = random_target_inputs(seed=3)
    expected = np_math.n_step_targets(
        returns, discount, q_online, q_target, double_q=double_q, rescaling=rescaling
    )
    got = tf_ops.n_step_targets(
        f32(returns), f32(discount), f32(q_online), f32(q_target), double_q, rescaling
    ).numpy()
    assert got.shape == expected.shape == returns.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("rescaling", [True, False], ids=["rescaled", "plain"])
def test_tf_action_gaps_and_corrected_targets_equal_numpy(rescaling):
    returns, discount, q_online, q_target = random_target_inputs(seed=4)
    actions = np.random.default_rng(4).integers(4, size=returns.shape)
    gaps = np_math.action_gaps(q_target, actions, rescaling)
    got_gaps = tf_ops.action_gaps(f32(q_target), tf.constant(actions, tf.int32), rescaling)
    np.testing.assert_allclose(got_gaps.numpy(), gaps, rtol=RTOL, atol=ATOL)
    assert (gaps > 0).any() and (gaps >= 0).all()
    expected = np_math.n_step_targets(
        returns, discount, q_online, q_target, rescaling=rescaling, correction=0.5 * gaps
    )
    got = tf_ops.n_step_targets(
        f32(returns), f32(discount), f32(q_online), f32(q_target), True, rescaling, 0.5 * got_gaps
    ).numpy()
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_double_q_and_max_targets_differ_on_these_inputs():
    """Guards the test above: the inputs must make double-Q matter."""
    returns, discount, q_online, q_target = random_target_inputs(seed=3)
    args = (f32(returns), f32(discount), f32(q_online), f32(q_target))
    double = tf_ops.n_step_targets(*args, True, False).numpy()
    plain = tf_ops.n_step_targets(*args, False, False).numpy()
    assert not np.allclose(double, plain)


def test_tf_sequence_priorities_equal_numpy():
    rng = np.random.default_rng(4)
    td = rng.normal(scale=2.0, size=(6, 5))
    mask = (rng.random((6, 5)) < 0.7).astype(np.float64)
    mask[0] = 0.0  # a row without valid steps
    expected = np_math.sequence_priorities(td, mask, 0.9)
    got = tf_ops.sequence_priorities(f32(td), f32(mask), 0.9).numpy()
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=1e-6)


# Hand-worked example: 2 sequences x 3 steps.
#   td   = [[0.5, -2.0, 100.0],   mask = [[1, 1, 0],   weights = [1, 0.5]
#           [1.0, -0.2,  10.0]]           [1, 1, 1]]
# Huber (delta 1): 0.5 -> 0.125, -2 -> 1.5, (100 masked out); 1 -> 0.5, -0.2 -> 0.02, 10 -> 9.5
#   row means: (0.125 + 1.5) / 2 = 0.8125 and (0.5 + 0.02 + 9.5) / 3 = 3.34
#   loss = (1 * 0.8125 + 0.5 * 3.34) / 2 = 1.24125
# Squared (d^2 / 2): 0.125, 2.0; 0.5, 0.02, 50.0
#   row means: 2.125 / 2 = 1.0625 and 50.52 / 3 = 16.84
#   loss = (1 * 1.0625 + 0.5 * 16.84) / 2 = 4.74125
TD = [[0.5, -2.0, 100.0], [1.0, -0.2, 10.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
WEIGHTS = [1.0, 0.5]


@pytest.mark.parametrize(("kind", "expected"), [("huber", 1.24125), ("mse", 4.74125)])
def test_sequence_loss_hand_worked_example(kind, expected):
    loss = tf_ops.sequence_loss(f32(TD), f32(MASK), f32(WEIGHTS), kind).numpy()
    assert loss == pytest.approx(expected, rel=1e-6)


def test_sequence_loss_row_without_valid_steps_contributes_zero():
    loss = tf_ops.sequence_loss(
        f32([[3.0, 4.0], [0.5, 0.0]]), f32([[0.0, 0.0], [1.0, 0.0]]), f32([1.0, 1.0]), "huber"
    ).numpy()
    assert loss == pytest.approx(0.125 / 2, rel=1e-6)
