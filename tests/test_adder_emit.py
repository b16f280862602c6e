"""`SequenceAdder._emit`'s shortcuts: each step's Q-values kept as floats with their
bootstrap value, and fields copied from arrays cached by the window's position."""

from __future__ import annotations

import numpy as np
import pytest
from small_layout import small_layout

from r2d2_agent.replay import SequenceAdder, SequenceLayout


def _layout(prev_action_reward: bool = False, **overrides: int) -> SequenceLayout:
    return small_layout(**overrides, prev_action_reward=prev_action_reward)


def _play(adder: SequenceAdder, episodes: int, length: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        adder.add_first(rng.normal(size=2))
        for t in range(length):
            adder.add(
                int(rng.integers(3)),
                float(rng.normal()),
                rng.normal(size=2),
                t == length - 1,
                False,
                rng.normal(size=(2, 3)),
                rng.normal(size=3),
            )


@pytest.mark.parametrize("prev_action_reward", [False, True])
def test_fields_follow_the_field_spec(prev_action_reward: bool) -> None:
    layout = _layout(prev_action_reward)
    records = []
    _play(SequenceAdder(records.append, layout, gamma=0.9, priority_eta=0.9, rescaling=True), 2, 7)
    spec = layout.field_spec()
    assert records
    for record in records:
        assert list(record.fields) == list(spec)
        for name, (shape, dtype) in spec.items():
            assert record.fields[name].shape == shape and record.fields[name].dtype == dtype


def test_records_own_their_fields() -> None:
    """Windows at the same position get equal fields from one cache, each its own copy:
    writing into a record changes no other record and no later one."""
    records = []
    adder = SequenceAdder(records.append, _layout(), gamma=0.9, priority_eta=0.9, rescaling=True)
    _play(adder, 3, 6)
    first_episode = len(records) // 3
    for record in records[:first_episode]:
        for array in record.fields.values():
            array[...] = 7  # a sink that reuses the arrays it is given
    clean = []
    _play(SequenceAdder(clean.append, _layout(), gamma=0.9, priority_eta=0.9, rescaling=True), 3, 6)
    for got, want in zip(records[first_episode:], clean[first_episode:], strict=True):
        for name in want.fields:
            np.testing.assert_array_equal(got.fields[name], want.fields[name], err_msg=name)
    arrays = [a for record in records for a in record.fields.values()]
    assert len({id(a) for a in arrays}) == len(arrays)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1 :])


def test_a_step_given_as_next_q_then_acted_on_bootstraps_each_window_on_its_own_q() -> None:
    """Window 0 is emitted on `next_q_values` (Y) of s_2, window 1 after s_2 was acted on
    (its own Q-values): each bootstraps on what was known when it was emitted."""
    gamma, eta = 0.5, 0.9
    layout = _layout(burnin=0, input_length=2, multisteps=1, period=1, input_sequence=1)
    records = []
    adder = SequenceAdder(records.append, layout, gamma=gamma, priority_eta=eta, rescaling=False)
    q = [np.array([1.0, 3.0, -2.0]), np.array([0.5, -1.0, 4.0]), np.array([2.0, 2.5, 0.0])]
    y, z = np.array([10.0, -5.0, 1.0]), np.array([-3.0, -4.0, -1.0])
    actions, rewards = [0, 2, 1], [1.0, -2.0, 0.25]
    adder.add_first(np.zeros(2))
    for t, next_q in enumerate([np.array([9.0, 9.0, 9.0]), y, z]):
        adder.add(
            actions[t],
            rewards[t],
            np.zeros(2),
            False,
            False,
            np.zeros((2, 3)),
            q[t],
            next_q_values=next_q,
        )

    def td(t: int, boot: np.ndarray) -> float:
        return abs(rewards[t] + gamma * boot.max() - q[t][actions[t]])

    def priority(deltas: list[float]) -> float:
        return eta * max(deltas) + (1 - eta) * sum(deltas) / len(deltas)

    assert len(records) == 2
    assert records[0].priority == pytest.approx(priority([td(0, q[1]), td(1, y)]), rel=1e-12)
    assert records[1].priority == pytest.approx(priority([td(1, q[2]), td(2, z)]), rel=1e-12)
