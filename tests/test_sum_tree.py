"""Tests of `r2d2_agent.replay.sum_tree.SumTree`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2_agent.replay.sum_tree import SumTree


def _brute_force_find(leaves: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Leaf i with prefix(i) <= u < prefix(i) + leaves[i], by linear search."""
    result = []
    for u in targets:
        prefix = 0.0
        for i, value in enumerate(leaves):
            if prefix <= u < prefix + value:
                result.append(i)
                break
            prefix += value
        else:
            raise AssertionError(f"no leaf holds target {u}")
    return np.array(result)


@st.composite
def _update_batches(draw):
    capacity = draw(st.integers(min_value=1, max_value=40))
    batches = draw(
        st.lists(
            st.lists(
                st.tuples(
                    st.integers(min_value=0, max_value=capacity - 1),
                    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
                ),
                min_size=1,
                max_size=12,
            ),
            min_size=1,
            max_size=6,
        )
    )
    return capacity, batches


@settings(max_examples=150, deadline=None)
@given(_update_batches())
def test_root_equals_sum_of_leaves_after_random_updates(case):
    capacity, batches = case
    tree = SumTree(capacity)
    for batch in batches:
        idx, vals = zip(*batch, strict=True)
        tree.update(np.array(idx), np.array(vals))
    leaves = tree.get(np.arange(capacity))
    assert tree.total == pytest.approx(math.fsum(leaves), rel=1e-12, abs=0.0)


@settings(max_examples=150, deadline=None)
@given(_update_batches())
def test_leaves_hold_last_written_value_after_random_updates(case):
    capacity, batches = case
    tree = SumTree(capacity)
    model = np.zeros(capacity)
    for batch in batches:
        idx, vals = zip(*batch, strict=True)
        tree.update(np.array(idx), np.array(vals))
        for i, v in batch:  # sequential reference model: later writes win
            model[i] = v
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), model)


def test_find_matches_brute_force_cumulative_search():
    rng = np.random.default_rng(0)
    capacity = 37
    tree = SumTree(capacity)
    # Small integers (a third of them zero) keep every prefix sum exact, so the
    # tree and the linear search must agree exactly, boundaries included.
    leaves = rng.integers(0, 6, size=capacity).astype(np.float64)
    leaves[rng.random(capacity) < 0.33] = 0.0
    tree.update(np.arange(capacity), leaves)
    prefixes = np.concatenate([[0.0], np.cumsum(leaves)[:-1]])
    targets = np.concatenate(
        [rng.random(500) * tree.total, prefixes[leaves > 0]]  # random + exact boundaries
    )
    np.testing.assert_array_equal(tree.find(targets), _brute_force_find(leaves, targets))


def test_find_never_returns_zero_leaf_or_unwritten_index():
    rng = np.random.default_rng(1)
    tree = SumTree(100)
    written = 60
    values = rng.random(written) * 10.0 ** rng.integers(-8, 8, size=written)
    values[::3] = 0.0
    tree.update(np.arange(written), values)
    targets = np.concatenate(
        [rng.random(20_000) * tree.total, [0.0, tree.total, np.nextafter(tree.total, 0.0)]]
    )
    found = tree.find(targets)
    assert found.max() < written
    assert np.all(tree.get(found) > 0.0)


def test_find_right_edge_round_off_does_not_enter_zero_subtree():
    tree = SumTree(4)
    # Leaves [1, 0, 1.5e-16, 0]: root = fl(1 + 1.5e-16) = 1 + 2**-52, so at the
    # right edge the residual 2**-52 exceeds the right subtree's mass 1.5e-16
    # and a naive descent would end on the never-written, zero leaf 3.
    tree.update(np.array([0, 2]), np.array([1.0, 1.5e-16]))
    assert tree.total - 1.0 > 1.5e-16  # the round-off this test is about happens
    np.testing.assert_array_equal(tree.find(np.array([tree.total])), [2])


def test_find_returns_shape_of_targets():
    tree = SumTree(4)
    tree.update(np.arange(4), np.ones(4))
    assert tree.find(np.array([[0.5, 1.5], [2.5, 3.5]])).tolist() == [[0, 1], [2, 3]]


def _tree_with_duplicate_update() -> SumTree:
    tree = SumTree(8)
    tree.update(np.array([3]), np.array([5.0]))
    # Applying each occurrence as a delta against the old value 5 would give
    # 5 + (1 - 5) + (2 - 5) + (8 - 5) = 4 on leaf 3's path instead of 8.
    tree.update(np.array([3, 6, 3, 3]), np.array([1.0, 4.0, 2.0, 8.0]))
    return tree


def test_duplicate_indices_in_one_update_last_value_wins():
    assert _tree_with_duplicate_update().get(np.array([3, 6])).tolist() == [8.0, 4.0]


def test_duplicate_indices_in_one_update_keep_the_total_exact():
    assert _tree_with_duplicate_update().total == 12.0


def test_find_on_empty_tree_raises():
    with pytest.raises(ValueError, match="empty"):
        SumTree(10).find(np.array([0.0]))


def test_find_after_all_leaves_zeroed_raises():
    tree = SumTree(3)
    tree.update(np.arange(3), np.ones(3))
    tree.update(np.arange(3), np.zeros(3))
    with pytest.raises(ValueError, match="empty"):
        tree.find(np.array([0.0]))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_update_rejects_negative_or_non_finite_value(bad):
    tree = SumTree(4)
    with pytest.raises(ValueError, match=str(bad)):
        tree.update(np.array([0, 1]), np.array([1.0, bad]))
    assert tree.total == 0.0  # nothing was written


@pytest.mark.parametrize("index", [-1, 4])
def test_update_rejects_out_of_range_index(index):
    with pytest.raises(ValueError, match="out of range"):
        SumTree(4).update(np.array([index]), np.array([1.0]))


@pytest.mark.parametrize("target", [-0.5, 3.5, float("nan")])
def test_find_rejects_target_outside_total(target):
    tree = SumTree(4)
    tree.update(np.arange(3), np.ones(3))
    with pytest.raises(ValueError, match="outside"):
        tree.find(np.array([target]))


def test_capacity_one_tree_finds_its_only_leaf():
    tree = SumTree(1)
    tree.update(np.array([0]), np.array([2.5]))
    assert tree.total == 2.5
    assert tree.find(np.array([0.0, 1.0, 2.5])).tolist() == [0, 0, 0]


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True])
def test_constructor_rejects_invalid_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        SumTree(capacity)


def test_update_rejects_value_that_could_overflow_total():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="<= "):
        tree.update(np.array([0]), np.array([1e308]))


def _large_tree():
    """A tree of 5,000 integer leaves after 20 random updates, and its leaves.

    Capacity above 2 * 1024 leaves so update() takes both the per-node path (wide levels)
    and the whole-level path (narrow levels near the root)."""
    rng = np.random.default_rng(2)
    capacity = 5000
    tree = SumTree(capacity)
    leaves = np.zeros(capacity)
    for _ in range(20):
        idx = rng.integers(0, capacity, size=300)
        vals = rng.integers(0, 4, size=300).astype(np.float64)
        tree.update(idx, vals)
        for i, v in zip(idx, vals, strict=True):
            leaves[i] = v
    return tree, leaves, rng


def test_large_tree_total_matches_brute_force():
    tree, leaves, _ = _large_tree()
    assert tree.total == leaves.sum()  # integer values: every sum is exact


def test_large_tree_find_matches_brute_force():
    tree, leaves, rng = _large_tree()
    targets = rng.random(2000) * tree.total
    expected = np.searchsorted(np.cumsum(leaves), targets, side="right")
    np.testing.assert_array_equal(tree.find(targets), expected)


@settings(max_examples=150, deadline=None)
@given(_update_batches())
def test_set_one_leaf_gives_the_nodes_of_update_bit_for_bit(case):
    capacity, batches = case
    by_set, by_update = SumTree(capacity), SumTree(capacity)
    for batch in batches:
        for i, v in batch:
            by_set.set(i, v)
            by_update.update(np.array([i]), np.array([v]))
    np.testing.assert_array_equal(by_set._nodes, by_update._nodes)


def test_set_agrees_with_update_on_a_tree_with_both_kinds_of_level():
    rng = np.random.default_rng(3)
    capacity = 5000  # wide levels walked per node by update, narrow ones recomputed whole
    by_set, by_update = SumTree(capacity), SumTree(capacity)
    start = rng.random(capacity)
    by_set.update(np.arange(capacity), start)
    by_update.update(np.arange(capacity), start)
    for i, v in zip(rng.integers(0, capacity, 300), rng.random(300) * 1e3, strict=True):
        by_set.set(int(i), float(v))
        by_update.update(np.array([i]), np.array([v]))
    np.testing.assert_array_equal(by_set._nodes, by_update._nodes)
    assert by_set.total == by_update.total


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (-1, 1.0, "out of range"),
        (4, 1.0, "out of range"),
        (1.0, 1.0, "integers"),
        (True, 1.0, "integers"),
        (0, -1.0, "-1.0"),
        (0, float("nan"), "nan"),
        (0, float("inf"), "inf"),
        (0, 1e308, "<= "),
    ],
)
def test_set_rejects_what_update_rejects_and_leaves_the_tree_unchanged(index, value, message):
    tree = SumTree(4)
    tree.set(2, 3.0)
    with pytest.raises(ValueError, match=message):
        tree.set(index, value)
    assert tree.total == 3.0 and tree.get(np.arange(4)).tolist() == [0.0, 0.0, 3.0, 0.0]
