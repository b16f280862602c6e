"""Tests of `PrioritizedSequenceReplay`'s keys: a priority written back for an item that
has been overwritten since it was sampled is skipped (the learner may train while actors
add), while a fresh one is applied."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.replay import PrioritizedSequenceReplay

SPEC = {"x": ((1,), np.float32)}


def item(value: float) -> dict[str, np.ndarray]:
    return {"x": np.array([value], np.float32)}


def probability_of(replay: PrioritizedSequenceReplay, value: float) -> float:
    """Sampling probability of the stored item whose x equals `value`."""
    keys, batch, probabilities = replay.sample(256)
    match = batch["x"][:, 0] == value
    assert match.any(), f"item {value} was never sampled"
    return float(probabilities[match][0])


@pytest.fixture
def full_replay() -> tuple[PrioritizedSequenceReplay, list[int]]:
    replay = PrioritizedSequenceReplay(2, SPEC, priority_exponent=1.0, seed=0)
    keys = [replay.add(item(0.0), 1.0), replay.add(item(1.0), 1.0)]
    return replay, keys


def test_stale_write_back_after_eviction_leaves_the_new_item_alone(full_replay):
    replay, (old_key, _) = full_replay
    replay.add(item(2.0), 1.0)  # evicts item 0 from its slot
    before = probability_of(replay, 2.0)
    applied = replay.update_priorities(np.array([old_key]), np.array([100.0]))
    assert applied == 0
    assert probability_of(replay, 2.0) == pytest.approx(before)


def test_fresh_write_back_changes_the_items_probability(full_replay):
    replay, (_, key) = full_replay
    before = probability_of(replay, 1.0)
    applied = replay.update_priorities(np.array([key]), np.array([100.0]))
    assert applied == 1
    assert probability_of(replay, 1.0) > before


def test_sampled_keys_are_accepted_by_update_priorities(full_replay):
    replay, _ = full_replay
    keys, _, _ = replay.sample(4)
    assert replay.update_priorities(keys, np.full(4, 3.0)) == 4


def test_keys_sampled_before_an_eviction_go_stale_for_the_evicted_slot_only(full_replay):
    replay, _ = full_replay
    keys, batch, _ = replay.sample(64)
    replay.add(item(2.0), 1.0)  # overwrites the slot of item 0
    applied = replay.update_priorities(keys, np.full(64, 5.0))
    assert applied == int((batch["x"][:, 0] == 1.0).sum())


def test_keys_equal_slot_indices_until_a_slot_is_overwritten(full_replay):
    replay, keys = full_replay
    assert keys == [0, 1]
    assert replay.add(item(2.0), 1.0) != 0


def test_add_batch_returns_one_current_key_per_surviving_item():
    replay = PrioritizedSequenceReplay(3, SPEC, priority_exponent=1.0, seed=0)
    keys = replay.add_batch({"x": np.arange(5, dtype=np.float32)[:, None]}, np.ones(5))
    assert len(set(keys.tolist())) == 5
    # items 0 and 1 were overwritten within the call by items 3 and 4
    assert replay.update_priorities(keys, np.ones(5)) == 3


def test_a_key_this_replay_never_handed_out_raises_naming_it(full_replay):
    replay, _ = full_replay
    never = (5 << 32) | 1  # slot 1, a generation not yet written
    with pytest.raises(ValueError, match=f"key {never} names no stored sequence"):
        replay.update_priorities(np.array([never]), np.array([1.0]))
