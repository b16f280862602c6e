"""Tests of `r2d2_agent.replay.prioritized.PrioritizedSequenceReplay`."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.replay.prioritized import PRIORITY_EPSILON, PrioritizedSequenceReplay

SPEC = {
    "obs": ((3, 2), np.float32),
    "action": ((3,), np.int32),
}


def _item(value: float) -> dict[str, np.ndarray]:
    return {
        "obs": np.full((3, 2), value, dtype=np.float32),
        "action": np.full((3,), int(value), dtype=np.int32),
    }


def _expected_probabilities(priorities: np.ndarray, alpha: float) -> np.ndarray:
    leaf = (np.asarray(priorities, dtype=np.float64) + PRIORITY_EPSILON) ** alpha
    return leaf / leaf.sum()


def _filled(priorities, alpha: float, capacity: int | None = None, seed: int = 0):
    replay = PrioritizedSequenceReplay(capacity or len(priorities), SPEC, alpha, seed=seed)
    for i, p in enumerate(priorities):
        replay.add(_item(i), p)
    return replay


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_sampling_frequencies_match_priority_power_chi_square(alpha):
    priorities = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 0.1, 10.0])
    replay = _filled(priorities, alpha, seed=1234)
    batch, n_batches = 64, 3125  # 200_000 draws
    counts = np.zeros(len(priorities))
    for _ in range(n_batches):
        indices, _, _ = replay.sample(batch)
        counts += np.bincount(indices, minlength=len(priorities))
    expected = batch * n_batches * _expected_probabilities(priorities, alpha)
    chi_square = float(np.sum((counts - expected) ** 2 / expected))
    # Critical value of the chi-square distribution with 8 - 1 = 7 degrees of
    # freedom at significance 0.001. Stratification only lowers the variance
    # of the counts, so this bound is conservative.
    assert chi_square < 24.322, (chi_square, counts, expected)


def test_sample_probabilities_equal_brute_force_normalised_priorities():
    rng = np.random.default_rng(3)
    priorities = rng.exponential(size=50)
    priorities[:5] = 0.0
    replay = _filled(priorities, 0.6)
    indices, _, probabilities = replay.sample(256)
    expected = _expected_probabilities(priorities, 0.6)[indices]
    np.testing.assert_allclose(probabilities, expected, rtol=1e-12, atol=0.0)


def test_sample_is_stratified_one_draw_per_equal_mass_segment():
    replay = _filled(np.ones(8), 1.0, seed=7)
    for _ in range(50):
        indices, _, _ = replay.sample(8)
        # Independent draws would repeat a slot in almost every batch of 8.
        assert indices.tolist() == list(range(8))


def test_sample_batch_has_the_field_shapes_and_dtypes():
    indices, batch, probabilities = _filled([1.0, 2.0, 3.0], 1.0).sample(5)
    assert batch["obs"].shape == (5, 3, 2) and batch["obs"].dtype == np.float32
    assert batch["action"].shape == (5, 3) and batch["action"].dtype == np.int32
    assert indices.shape == probabilities.shape == (5,)


def test_sample_returns_the_content_stored_at_the_sampled_indices():
    indices, batch, _ = _filled([1.0, 2.0, 3.0], 1.0).sample(5)
    np.testing.assert_array_equal(batch["obs"][:, 0, 0], indices.astype(np.float32))
    np.testing.assert_array_equal(batch["action"][:, 0], indices)


def test_same_seed_gives_same_samples():
    priorities = np.arange(1.0, 21.0)
    a, b = (_filled(priorities, 0.6, seed=5) for _ in range(2))
    np.testing.assert_array_equal(a.sample(16)[0], b.sample(16)[0])


def test_different_seed_gives_different_samples():
    priorities = np.arange(1.0, 21.0)
    a, c = (_filled(priorities, 0.6, seed=s) for s in (5, 6))
    assert not np.array_equal(a.sample(16)[0], c.sample(16)[0])


def test_sample_from_empty_replay_raises():
    replay = PrioritizedSequenceReplay(4, SPEC, 0.6)
    with pytest.raises(ValueError, match="empty"):
        replay.sample(2)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_sample_rejects_invalid_batch_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        _filled([1.0], 1.0).sample(batch_size)


def _five_items_in_three_slots():
    replay = PrioritizedSequenceReplay(3, SPEC, 1.0, seed=0)
    slots = [replay.add(_item(i), 1.0) for i in range(5)]
    return replay, slots


def test_add_fills_slots_in_ring_order():
    _, keys = _five_items_in_three_slots()
    assert [key & 0xFFFF_FFFF for key in keys] == [0, 1, 2, 0, 1]


def test_keys_of_overwritten_slots_carry_the_next_generation():
    _, keys = _five_items_in_three_slots()
    assert [key >> 32 for key in keys] == [0, 0, 0, 1, 1]


def test_len_stays_at_capacity_when_full():
    replay, _ = _five_items_in_three_slots()
    assert len(replay) == 3


def test_fifo_overwrites_oldest_slot_when_full():
    replay, _ = _five_items_in_three_slots()
    keys, batch, _ = replay.sample(30)
    slots = (keys & 0xFFFF_FFFF).tolist()
    content = dict(zip(slots, batch["obs"][:, 0, 0].tolist(), strict=True))
    assert content == {0: 3.0, 1: 4.0, 2: 2.0}


def test_overwrite_replaces_priority_of_evicted_item():
    replay = PrioritizedSequenceReplay(2, SPEC, 1.0, seed=0)
    replay.add(_item(0), 1000.0)
    replay.add(_item(1), 1.0)
    replay.add(_item(2), 1.0)  # evicts item 0 and its large priority
    _, _, probabilities = replay.sample(4)
    np.testing.assert_allclose(probabilities, 0.5, rtol=1e-12)


def test_update_priorities_changes_sampling_probabilities():
    replay = _filled(np.ones(4), 1.0, seed=2)
    replay.update_priorities(np.array([1, 2]), np.array([0.0, 97.0]))
    indices, _, probabilities = replay.sample(6400)
    expected = _expected_probabilities([1.0, 0.0, 97.0, 1.0], 1.0)
    np.testing.assert_allclose(probabilities, expected[indices], rtol=1e-12)
    assert 1 not in indices  # epsilon-only priority: P ~ 1e-8 per draw
    assert np.mean(indices == 2) == pytest.approx(0.97, abs=0.01)


def test_update_priorities_duplicate_indices_last_wins():
    replay = _filled(np.ones(2), 1.0)
    replay.update_priorities(np.array([0, 0]), np.array([9.0, 3.0]))
    _, _, probabilities = replay.sample(64)
    assert set(np.round(probabilities, 6)) == {0.75, 0.25}


@pytest.mark.parametrize("bad", [float("nan"), -0.5, float("inf")])
def test_update_priorities_rejects_nan_negative_or_infinite(bad):
    replay = _filled([1.0, 1.0], 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        replay.update_priorities(np.array([0, 1]), np.array([1.0, bad]))


def test_update_priorities_rejects_slot_without_sequence():
    replay = PrioritizedSequenceReplay(4, SPEC, 1.0)
    replay.add(_item(0), 1.0)
    with pytest.raises(ValueError, match="key 2 names no stored sequence"):
        replay.update_priorities(np.array([2]), np.array([1.0]))


def test_add_rejects_wrong_shape_naming_field_and_shapes():
    replay = PrioritizedSequenceReplay(4, SPEC, 1.0)
    item = _item(0)
    item["obs"] = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"'obs'.*expected shape \(3, 2\), got shape \(4, 2\)"):
        replay.add(item, 1.0)
    assert len(replay) == 0


def test_add_rejects_missing_field():
    item = _item(0)
    del item["action"]
    with pytest.raises(ValueError, match="missing field.*action"):
        PrioritizedSequenceReplay(4, SPEC, 1.0).add(item, 1.0)


def test_add_rejects_extra_field():
    item = {**_item(0), "reward": np.zeros(3)}
    with pytest.raises(ValueError, match="unexpected field.*reward"):
        PrioritizedSequenceReplay(4, SPEC, 1.0).add(item, 1.0)


def test_add_rejects_value_of_incompatible_dtype_kind():
    item = {**_item(0), "action": np.full((3,), 1.5)}
    with pytest.raises(ValueError, match="'action'.*float64"):
        PrioritizedSequenceReplay(4, SPEC, 1.0).add(item, 1.0)


@pytest.mark.parametrize("bad", [float("nan"), -1.0])
def test_add_rejects_nan_or_negative_priority(bad):
    replay = PrioritizedSequenceReplay(4, SPEC, 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        replay.add(_item(0), bad)
    assert len(replay) == 0


def test_add_batch_rejects_wrong_batch_shape():
    replay = PrioritizedSequenceReplay(4, SPEC, 1.0)
    items = {"obs": np.zeros((2, 3, 2), np.float32), "action": np.zeros((3, 3), np.int32)}
    with pytest.raises(ValueError, match=r"'action'.*expected shape \(2, 3\), got shape \(3, 3\)"):
        replay.add_batch(items, np.ones(2))


def test_add_batch_equivalent_to_repeated_add():
    capacity, seed = 5, 11
    priorities = np.array([0.3, 2.0, 0.0, 5.0, 1.0, 0.7, 4.0, 2.5, 0.1])
    items = [_item(i) for i in range(len(priorities))]
    one_by_one = PrioritizedSequenceReplay(capacity, SPEC, 0.6, seed=seed)
    slots_single = [one_by_one.add(item, p) for item, p in zip(items, priorities, strict=True)]
    batched = PrioritizedSequenceReplay(capacity, SPEC, 0.6, seed=seed)
    slots_batched = []
    # Second chunk (7 items) is larger than capacity and wraps within itself.
    for chunk in (slice(0, 2), slice(2, 9)):
        stacked = {k: np.stack([it[k] for it in items[chunk]]) for k in SPEC}
        slots_batched.extend(batched.add_batch(stacked, priorities[chunk]).tolist())
    assert slots_batched == slots_single
    assert len(batched) == len(one_by_one) == capacity
    for (ia, ba, pa), (ib, bb, pb) in zip(
        [one_by_one.sample(32) for _ in range(3)],
        [batched.sample(32) for _ in range(3)],
        strict=True,
    ):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(pa, pb)
        for k in SPEC:
            np.testing.assert_array_equal(ba[k], bb[k])


def test_properties_report_constructor_arguments():
    replay = PrioritizedSequenceReplay(7, SPEC, 0.9)
    assert (replay.capacity, replay.priority_exponent, len(replay)) == (7, 0.9, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity"),
        ({"priority_exponent": -0.1}, "priority_exponent"),
        ({"priority_exponent": float("nan")}, "priority_exponent"),
        ({"spec": {"obs": ((3,), "not-a-dtype")}}, "'obs'"),
        ({"spec": {"obs": ((-1,), np.float32)}}, "'obs'"),
    ],
)
def test_constructor_rejects_invalid_arguments(kwargs, message):
    args = {"capacity": 4, "spec": SPEC, "priority_exponent": 0.6, **kwargs}
    with pytest.raises(ValueError, match=message):
        PrioritizedSequenceReplay(**args)


def _full_replay_after_a_too_large_priority():
    """A full replay of items 7 and 8 after an add of item 9 with priority 1e308 (two
    leaves of 1e308 would overflow the float64 total) failed as expected."""
    replay = PrioritizedSequenceReplay(2, SPEC, 1.0, seed=0)
    replay.add(_item(7), 1.0)
    replay.add(_item(8), 1.0)
    with pytest.raises(ValueError, match="non-negative, finite"):
        replay.add(_item(9), 1e308)
    return replay


def test_add_rejects_priority_too_large_for_tree_and_keeps_old_item():
    _, batch, probabilities = _full_replay_after_a_too_large_priority().sample(8)
    assert sorted(set(batch["obs"][:, 0, 0].tolist())) == [7.0, 8.0]  # slot 0 keeps item 7
    np.testing.assert_array_equal(probabilities, 0.5)


def test_rejected_add_does_not_advance_the_ring():
    key = _full_replay_after_a_too_large_priority().add(_item(9), 1.0)
    assert key & 0xFFFF_FFFF == 0
