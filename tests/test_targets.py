"""Tests of the pure numpy target and priority math of `r2d2_agent.math`: value rescaling,
n-step returns and targets, TD errors, sequence priorities, importance weights and
schedules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2_agent.math import (
    RESCALE_EPS,
    action_gaps,
    apex_epsilon,
    importance_weights,
    inverse_rescale,
    linear_schedule,
    n_step_returns,
    n_step_targets,
    rescale,
    sequence_priorities,
    td_errors,
)

GRID = np.concatenate(
    [
        np.linspace(-1e4, 1e4, 20001),
        np.linspace(-2.0, 2.0, 4001),
        np.geomspace(1e-12, 1e4, 500),
        -np.geomspace(1e-12, 1e4, 500),
    ]
)
FINITE = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False)


def test_rescale_hand_values():
    assert rescale(0.0) == 0.0
    assert rescale(3.0) == pytest.approx(1.003, abs=1e-15)
    assert rescale(-3.0) == pytest.approx(-1.003, abs=1e-15)
    assert rescale(8.0) == pytest.approx(2.0 + 8 * RESCALE_EPS, abs=1e-15)


def test_inverse_rescale_hand_values():
    assert inverse_rescale(0.0) == 0.0
    assert inverse_rescale(1.003) == pytest.approx(3.0, rel=1e-13)
    assert inverse_rescale(-2.008) == pytest.approx(-8.0, rel=1e-13)


def test_inverse_rescale_matches_spec_formula():
    eps = RESCALE_EPS
    x = np.linspace(-50.0, 50.0, 1001)
    naive = np.sign(x) * (((np.sqrt(1 + 4 * eps * (np.abs(x) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1)
    np.testing.assert_allclose(inverse_rescale(x), naive, rtol=1e-9, atol=1e-9)


def test_round_trip_dense_grid_float64():
    np.testing.assert_allclose(rescale(inverse_rescale(GRID)), GRID, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(inverse_rescale(rescale(GRID)), GRID, rtol=1e-12, atol=1e-15)


def test_rescale_and_inverse_rescale_keep_float32():
    x = GRID.astype(np.float32)
    assert rescale(x).dtype == np.float32 and inverse_rescale(x).dtype == np.float32


def test_round_trip_dense_grid_float32():
    x = GRID.astype(np.float32)
    np.testing.assert_allclose(inverse_rescale(rescale(x)), x, rtol=2e-5, atol=1e-30)
    np.testing.assert_allclose(rescale(inverse_rescale(x)), x, rtol=2e-5, atol=1e-30)


@settings(max_examples=300, deadline=None)
@given(FINITE)
def test_round_trip_hypothesis(x):
    assert float(rescale(inverse_rescale(x))) == pytest.approx(x, rel=1e-12, abs=1e-300)
    assert float(inverse_rescale(rescale(x))) == pytest.approx(x, rel=1e-12, abs=1e-300)


def test_rescale_is_odd():
    x = np.linspace(-1e3, 1e3, 10001)
    np.testing.assert_array_equal(rescale(-x), -rescale(x))


def test_rescale_is_increasing():
    x = np.linspace(-1e3, 1e3, 10001)
    assert np.all(np.diff(rescale(x)) > 0)


def _reference_returns(rewards, terminated, gamma, n):
    """Brute-force double loop."""
    size = len(rewards)
    g, d, k = [], [], []
    for t in range(size):
        steps = min(n, size - t)
        total = 0.0
        for j in range(steps):
            total += gamma**j * rewards[t + j]
        g.append(total)
        k.append(steps)
        d.append(0.0 if terminated and t + steps == size else gamma**steps)
    return np.array(g), np.array(d), np.array(k)


@pytest.mark.parametrize(
    ("size", "terminated", "truncated", "n"),
    [
        (1, True, False, 3),
        (2, True, False, 3),
        (5, True, False, 3),
        (9, True, False, 3),
        (7, False, True, 3),
        (7, True, True, 3),
        (7, False, False, 3),
        (4, True, False, 10),
        (4, False, True, 10),
        (6, True, False, 1),
        (6, False, True, 1),
        (0, True, False, 2),
    ],
)
def test_n_step_returns_matches_brute_force(size, terminated, truncated, n):
    rewards = np.random.default_rng(size * 10 + n).normal(size=size)
    g, d, k = n_step_returns(rewards, terminated, truncated, 0.9, n)
    rg, rd, rk = _reference_returns(rewards, terminated, 0.9, n)
    np.testing.assert_allclose(g, rg, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d, rd, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(k, rk)
    assert g.shape == d.shape == k.shape == (size,)


def test_n_step_returns_hand_values():
    g, d, k = n_step_returns([1.0, 2.0, 4.0], True, False, 0.5, 2)
    np.testing.assert_allclose(g, [2.0, 4.0, 4.0])
    np.testing.assert_allclose(d, [0.25, 0.0, 0.0])
    np.testing.assert_array_equal(k, [2, 2, 1])


def test_n_step_returns_of_a_truncated_episode_bootstrap_to_the_end():
    _, d, _ = n_step_returns([1.0, 2.0, 4.0], False, True, 0.5, 2)
    np.testing.assert_allclose(d, [0.25, 0.25, 0.5])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rewards": np.zeros((2, 2))}, "rewards"),
        ({"gamma": 1.5}, "gamma"),
        ({"n": 0}, "n"),
    ],
)
def test_n_step_returns_rejects_bad_arguments(kwargs, name):
    args = {"rewards": np.zeros(3), "terminated": True, "truncated": False, "gamma": 0.9, "n": 2}
    with pytest.raises(ValueError, match=name):
        n_step_returns(**(args | kwargs))


# Online picks action 0 for row 0 and action 2 for row 1; target maxima are elsewhere.
Q_ONLINE = np.array([[5.0, 1.0, 0.0], [0.0, 1.0, 3.0]])
Q_TARGET = np.array([[1.0, 4.0, 2.0], [6.0, 0.5, 2.0]])


def test_n_step_targets_double_q_without_rescaling():
    y = n_step_targets([1.0, 2.0], [0.5, 0.25], Q_ONLINE, Q_TARGET, double_q=True, rescaling=False)
    np.testing.assert_allclose(y, [1.0 + 0.5 * 1.0, 2.0 + 0.25 * 2.0])


def test_n_step_targets_max_without_rescaling():
    y = n_step_targets([1.0, 2.0], [0.5, 0.25], Q_ONLINE, Q_TARGET, double_q=False, rescaling=False)
    np.testing.assert_allclose(y, [1.0 + 0.5 * 4.0, 2.0 + 0.25 * 6.0])


def test_n_step_targets_with_rescaling():
    y = n_step_targets([1.0, 2.0], [0.5, 0.25], Q_ONLINE, Q_TARGET, double_q=True)
    expected = rescale(np.array([1.0, 2.0]) + np.array([0.5, 0.25]) * inverse_rescale([1.0, 2.0]))
    np.testing.assert_allclose(y, expected, rtol=1e-14)


def test_n_step_target_with_rescaling_hand_value():
    # h(3) = 1.003 by hand: G = 3 with a terminal bootstrap.
    y = n_step_targets([3.0], [0.0], Q_ONLINE[:1], Q_TARGET[:1])
    np.testing.assert_allclose(y, [1.003], rtol=1e-14)


def test_n_step_targets_zero_discount_ignores_non_finite_q():
    q = np.array([[np.nan, np.inf]])
    y = n_step_targets([2.0], [0.0], q, q, double_q=True, rescaling=False)
    np.testing.assert_array_equal(y, [2.0])


# Advantage learning ------------------------------------------------------------------------
def test_action_gaps_without_rescaling_hand_values():
    # Q_TARGET rows [1, 4, 2] and [6, 0.5, 2]: the best is 4 and 6.
    np.testing.assert_allclose(action_gaps(Q_TARGET, [0, 0], rescaling=False), [3.0, 0.0])
    np.testing.assert_allclose(action_gaps(Q_TARGET, [2, 1], rescaling=False), [2.0, 5.5])


def test_action_gaps_are_taken_in_return_units_with_rescaling():
    q = rescale(np.array([[10.0, 40.0, 25.0]]))  # returns 10, 40, 25 in the network's units
    np.testing.assert_allclose(action_gaps(q, [0]), [30.0], rtol=1e-12)
    np.testing.assert_allclose(action_gaps(q, [2]), [15.0], rtol=1e-12)
    np.testing.assert_allclose(action_gaps(q, [1]), [0.0], atol=1e-12)


def test_n_step_targets_subtract_the_correction_in_return_units():
    # G + D max Q' - c: 1 + 0.5 * 4 - 0.5 = 2.5 (without h), h(2.5) with it.
    args = ([1.0], [0.5], Q_ONLINE[:1], Q_TARGET[:1])
    plain = n_step_targets(*args, double_q=False, rescaling=False, correction=[0.5])
    np.testing.assert_allclose(plain, [2.5])
    q_target = rescale(Q_TARGET[:1])
    rescaled = n_step_targets(
        [1.0], [0.5], Q_ONLINE[:1], q_target, double_q=False, correction=[0.5]
    )
    np.testing.assert_allclose(rescaled, rescale(np.array([2.5])), rtol=1e-12)


@pytest.mark.parametrize("rescaling", [False, True], ids=["plain", "rescaled"])
@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9])
def test_advantage_learning_iterated_reaches_its_fixed_point(alpha, rescaling):
    """A one-step bandit (γ = 0), every action's target iterated from Q = 0: the best
    action keeps its reward r*, the others go to (r - α r*) / (1 - α), so each gap grows
    to (r* - r) / (1 - α) (Bellemare et al. 2016, worked by hand for this case)."""
    rewards = np.array([1.0, 0.25, -2.0])
    q = np.zeros((1, 3))
    actions = np.arange(3)[None, :]  # every action's target in one row of three steps
    for _ in range(400):
        q_rows = np.repeat(q[:, None, :], 3, axis=1)  # Q(s, .) at each of the three steps
        gaps = action_gaps(q_rows, actions, rescaling)
        y = n_step_targets(
            rewards[None, :],
            np.zeros((1, 3)),
            q_rows,
            q_rows,
            rescaling=rescaling,
            correction=alpha * gaps,
        )
        q = y  # each action's value is its target (a learner that fits exactly)
    values = inverse_rescale(q[0]) if rescaling else q[0]
    best = rewards.max()
    expected = np.where(rewards == best, best, (rewards - alpha * best) / (1.0 - alpha))
    np.testing.assert_allclose(values, expected, rtol=1e-9, atol=1e-9)


def test_td_errors_are_targets_minus_q():
    np.testing.assert_allclose(td_errors([1.0, 2.0], [0.5, 3.0]), [0.5, -1.0])


def test_sequence_priorities_hand_values_with_mask():
    td = np.array([[1.0, -3.0, 2.0, 100.0], [0.0, 0.0, 0.0, 0.0], [-4.0, 7.0, 1.0, 1.0]])
    mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=np.float32)
    p = sequence_priorities(td, mask, eta=0.9)
    np.testing.assert_allclose(p, [0.9 * 3.0 + 0.1 * 2.0, 0.0, 4.0])
    assert p.shape == (3,)


@pytest.mark.parametrize(("eta", "priority"), [(1.0, 5.0), (0.0, 3.0)], ids=["max", "mean"])
def test_sequence_priorities_eta_extremes(eta, priority):
    td, mask = np.array([[1.0, -5.0]]), np.ones((1, 2))
    np.testing.assert_allclose(sequence_priorities(td, mask, eta=eta), [priority])


def test_importance_weights_hand_values():
    p = np.array([0.5, 0.25, 0.125])
    w = importance_weights(p, size=4, beta=1.0)
    raw = (4 * p) ** -1.0
    np.testing.assert_allclose(w, raw / raw.max())
    np.testing.assert_allclose(w, [0.25, 0.5, 1.0])


def test_importance_weights_do_not_depend_on_the_replay_size():
    p = np.array([0.5, 0.25, 0.125])
    np.testing.assert_allclose(importance_weights(p, size=10, beta=0.5), (p / 0.125) ** -0.5)


def test_importance_weights_are_one_at_beta_zero():
    p = np.array([0.5, 0.25, 0.125])
    assert importance_weights(p, size=4, beta=0.0).tolist() == [1.0, 1.0, 1.0]


def test_importance_weights_rejects_zero_probability():
    with pytest.raises(ValueError, match="probabilities"):
        importance_weights([0.5, 0.0], size=2, beta=0.5)


@pytest.mark.parametrize(
    ("duration", "t", "value"),
    [(100, 0, 0.4), (100, 50, 0.7), (100, 100, 1.0), (100, 10_000, 1.0)],
    ids=["start", "middle", "end", "after_the_end"],
)
def test_linear_schedule_goes_from_start_to_end_then_stays(duration, t, value):
    assert linear_schedule(0.4, 1.0, duration, t) == pytest.approx(value)


def test_linear_schedule_of_zero_duration_is_at_its_end():
    assert linear_schedule(0.4, 1.0, 0, 5) == 1.0


@pytest.mark.parametrize(
    ("index", "nb_actors", "epsilon"),
    [(0, 1, 0.4), (0, 8, 0.4), (7, 8, 0.4**8), (2, 5, 0.4 ** (1 + 7 * 2 / 4))],
)
def test_apex_epsilon_values(index, nb_actors, epsilon):
    assert apex_epsilon(index, nb_actors) == pytest.approx(epsilon)


def test_apex_epsilon_with_own_base_and_exponent():
    assert math.isclose(apex_epsilon(1, 3, epsilon=0.5, alpha=2.0), 0.25)


@pytest.mark.parametrize(("index", "nb_actors"), [(-1, 4), (4, 4), (0, 0)])
def test_apex_epsilon_rejects_bad_index(index, nb_actors):
    with pytest.raises(ValueError, match="index|nb_actors"):
        apex_epsilon(index, nb_actors)
