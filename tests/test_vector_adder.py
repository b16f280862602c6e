"""`VectorSequenceAdder` against N `SequenceAdder`s: the same records, bit for bit.

Each case plays N envs side by side with episodes of different lengths (one ends every
step, one is truncated, others run long), feeding the same transitions to one
`VectorSequenceAdder` and to N separate `SequenceAdder`s; each env's records must agree
field for field, frame for frame, with the same priority and reward moments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from small_layout import small_layout

from r2d2_agent.replay import SequenceAdder, SequenceLayout, SequenceRecord
from r2d2_agent.replay.env_adders import BATCHED_FROM_ENVS, PerEnvAdders, make_env_adders
from r2d2_agent.replay.vector_adder import VectorSequenceAdder


@dataclass(frozen=True)
class Case:
    name: str
    layout: dict = field(default_factory=dict)
    gamma: float = 0.9
    rescaling: bool = True
    normalize_rewards: bool = False
    eta: float = 0.9
    reward_scale: float = 1.0


CASES = [
    Case("base"),
    Case("no_rescaling", rescaling=False),
    Case("gamma_0", gamma=0.0, rescaling=False, layout={"multisteps": 1}),
    Case("normalized_rewards", normalize_rewards=True, reward_scale=40.0),
    Case("prev_action_reward", layout={"prev_action_reward": True}),
    Case("no_burnin_one_frame", layout={"burnin": 0, "input_sequence": 1}),
    Case("period_1_n_3", layout={"period": 1, "multisteps": 3}),
    Case("period_L", layout={"period": 4, "burnin": 3}),
    Case("eta_0", eta=0.0),
    Case("long_window", layout={"input_length": 24, "period": 12, "burnin": 6, "multisteps": 5}),
    Case("uint8_frames", layout={"frame_dtype": np.uint8, "frame_shape": (3, 2)}),
    Case("drop_covered_windows", layout={"drop_covered_windows": True}),
    Case(
        "drop_covered_windows_long",
        layout={"drop_covered_windows": True, "input_length": 8, "period": 2, "multisteps": 1},
    ),
]

# episode lengths per env: ends every step, short, truncated, long
LENGTHS = [[1] * 40, [3, 7, 2, 9, 5, 14], [6, 30], [60]]
TRUNCATED = [False, False, True, False]


def _layout(case: Case) -> SequenceLayout:
    return small_layout(**case.layout)


def _play(case: Case, steps: int, seed: int, with_next_q: bool):
    """Feeds the same random transitions to both; returns (vector records, single records)."""
    layout = _layout(case)
    n = len(LENGTHS)
    kwargs = dict(
        gamma=case.gamma,
        priority_eta=case.eta,
        rescaling=case.rescaling,
        normalize_rewards=case.normalize_rewards,
    )
    got: list[list[SequenceRecord]] = [[] for _ in range(n)]
    want: list[list[SequenceRecord]] = [[] for _ in range(n)]
    vector = VectorSequenceAdder([got[j].append for j in range(n)], layout, **kwargs)
    singles = [SequenceAdder(want[j].append, layout, **kwargs) for j in range(n)]
    rng = np.random.default_rng(seed)
    shape, dtype = layout.frame_shape, layout.frame_dtype

    def frame() -> np.ndarray:
        return (rng.normal(size=shape) * 50 + 100).astype(dtype)

    episode = [0] * n
    t_in_episode = [0] * n
    for j in range(n):
        first = frame()
        vector.add_first(j, first)
        singles[j].add_first(first)
    for _ in range(steps):
        actions = rng.integers(3, size=n)
        rewards = rng.normal(size=n) * case.reward_scale
        frames = np.stack([frame() for _ in range(n)])
        states = rng.normal(size=(n, 2, layout.state_size)).astype(np.float32)
        q = rng.normal(size=(n, 3))
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        for j in range(n):
            lengths = LENGTHS[j]
            length = lengths[episode[j] % len(lengths)]
            if t_in_episode[j] + 1 >= length:
                truncated[j] = TRUNCATED[j]
                terminated[j] = not TRUNCATED[j]
        next_q = {}
        if with_next_q:
            next_q = {j: rng.normal(size=3) for j in np.flatnonzero(truncated).tolist()}
        vector.add(actions, rewards, frames, terminated, truncated, states, q, next_q)
        for j in range(n):
            singles[j].add(
                int(actions[j]),
                float(rewards[j]),
                frames[j],
                bool(terminated[j]),
                bool(truncated[j]),
                states[j],
                q[j],
                next_q.get(j),
            )
        for j in range(n):
            t_in_episode[j] += 1
            if terminated[j] or truncated[j]:
                episode[j] += 1
                t_in_episode[j] = 0
                first = frame()
                vector.add_first(j, first)
                singles[j].add_first(first)
    return got, want


def _assert_same(got: list[SequenceRecord], want: list[SequenceRecord]) -> None:
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        assert list(a.fields) == list(b.fields)
        for name in b.fields:
            assert a.fields[name].dtype == b.fields[name].dtype, name
            assert a.fields[name].shape == b.fields[name].shape, name
            assert a.fields[name].tobytes() == b.fields[name].tobytes(), name
        assert np.float64(a.priority).tobytes() == np.float64(b.priority).tobytes()
        assert a.frames.dtype == b.frames.dtype and a.frames.shape == b.frames.shape
        assert a.frames.tobytes() == b.frames.tobytes()
        assert a.first_frame == b.first_frame
        assert a.reward_count == b.reward_count
        assert (
            np.float64(a.reward_sum_square).tobytes() == np.float64(b.reward_sum_square).tobytes()
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("with_next_q", [False, True])
def test_n_envs_record_what_n_sequence_adders_record(case: Case, with_next_q: bool) -> None:
    got, want = _play(case, steps=150, seed=3, with_next_q=with_next_q)
    for j in range(len(LENGTHS)):
        _assert_same(got[j], want[j])


def test_records_own_their_fields() -> None:
    """Windows built in one batch share no memory: writing into one record's fields
    changes no other record."""
    got, _ = _play(CASES[0], steps=60, seed=1, with_next_q=False)
    records = [r for env in got for r in env]
    before = [{k: v.copy() for k, v in r.fields.items()} for r in records]
    for name in records[0].fields:
        records[0].fields[name][...] = 7
    for record, fields in zip(records[1:], before[1:], strict=True):
        for name, value in fields.items():
            assert np.array_equal(record.fields[name], value), name


def _adder(n: int = 2, **kwargs) -> VectorSequenceAdder:
    sinks = [lambda r: None] * n
    return VectorSequenceAdder(
        sinks, _layout(Case("x")), gamma=0.9, priority_eta=0.9, rescaling=True, **kwargs
    )


def _step(adder: VectorSequenceAdder, **overrides):
    n = adder.num_envs
    args = dict(
        actions=np.zeros(n, np.int64),
        rewards=np.zeros(n),
        next_frames=np.zeros((n, 2), np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        states=np.zeros((n, 2, 3), np.float32),
        q_values=np.zeros((n, 3)),
    )
    adder.add(**(args | overrides))


def test_add_before_every_env_started_names_the_env() -> None:
    adder = _adder()
    adder.add_first(0, np.zeros(2))
    with pytest.raises(RuntimeError, match="env 1"):
        _step(adder)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"actions": np.array([0, 3])}, r"actions must be integers in \[0, 3\)"),
        ({"actions": np.array([0.5, 1.0])}, "actions must be 2 integers"),
        ({"states": np.zeros((2, 2, 4), np.float32)}, r"states must have shape \(2, 2, 3\)"),
        ({"next_frames": np.zeros((2, 3))}, "next_frames must have shape"),
        ({"q_values": np.zeros(3)}, "q_values must have shape"),
        ({"next_q_values": {0: np.zeros(3)}}, "episode ends at this step, got env 0"),
    ],
)
def test_bad_input_is_refused_with_the_value(overrides: dict, match: str) -> None:
    adder = _adder()
    for j in range(2):
        adder.add_first(j, np.zeros(2))
    with pytest.raises(ValueError, match=match):
        _step(adder, **overrides)


def test_a_refused_step_leaves_the_adder_as_it_was() -> None:
    """A step refused for its `next_q_values` changes nothing: the records afterwards are
    those of an adder that never saw it."""
    outputs = []
    for refuse in (False, True):
        records: list[SequenceRecord] = []
        adder = VectorSequenceAdder(
            [records.append], _layout(Case("x")), gamma=0.9, priority_eta=0.9, rescaling=True
        )
        adder.add_first(0, np.zeros(2))
        rng = np.random.default_rng(0)
        for t in range(12):
            step = dict(
                actions=np.array([t % 3]),
                rewards=rng.normal(size=1),
                next_frames=rng.normal(size=(1, 2)).astype(np.float32),
                terminated=np.array([t == 11]),
                truncated=np.zeros(1, bool),
                states=rng.normal(size=(1, 2, 3)).astype(np.float32),
                q_values=rng.normal(size=(1, 3)),
            )
            if refuse and t == 5:
                with pytest.raises(ValueError, match="episode ends at this step"):
                    adder.add(**step, next_q_values={0: np.zeros(3)})
            adder.add(**step)
        outputs.append(records)
    _assert_same(outputs[1], outputs[0])


def test_the_number_of_actions_stays_what_the_first_step_had() -> None:
    adder = _adder()
    for j in range(2):
        adder.add_first(j, np.zeros(2))
    _step(adder)
    with pytest.raises(ValueError, match=r"q_values must have shape \(2, 3\)"):
        _step(adder, q_values=np.zeros((2, 4)))


def test_add_first_mid_episode_is_refused() -> None:
    adder = _adder()
    adder.add_first(0, np.zeros(2))
    with pytest.raises(RuntimeError, match="mid-episode of env 0"):
        adder.add_first(0, np.zeros(2))


def test_without_sinks_or_with_a_bad_rate_it_refuses() -> None:
    layout = _layout(Case("x"))
    with pytest.raises(ValueError, match="at least one sink"):
        VectorSequenceAdder([], layout, gamma=0.9, priority_eta=0.9, rescaling=True)
    with pytest.raises(ValueError, match="gamma must be in"):
        VectorSequenceAdder([print], layout, gamma=1.5, priority_eta=0.9, rescaling=True)
    with pytest.raises(ValueError, match="sinks must be callable"):
        VectorSequenceAdder([3], layout, gamma=0.9, priority_eta=0.9, rescaling=True)


@pytest.mark.parametrize(
    ("envs", "batched", "kind"),
    [
        (1, None, PerEnvAdders),
        (BATCHED_FROM_ENVS - 1, None, PerEnvAdders),
        (BATCHED_FROM_ENVS, None, VectorSequenceAdder),
        (2, True, VectorSequenceAdder),
        (BATCHED_FROM_ENVS, False, PerEnvAdders),
    ],
)
def test_the_adder_of_n_envs_is_chosen_by_their_number(envs, batched, kind) -> None:
    adder = make_env_adders(
        [print] * envs,
        _layout(Case("x")),
        batched=batched,
        gamma=0.9,
        priority_eta=0.9,
        rescaling=True,
    )
    assert isinstance(adder, kind) and adder.num_envs == envs


@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: c.name)
def test_per_env_adders_record_what_the_arrays_record(case: Case) -> None:
    """The two adders of N envs behind one interface: the same records."""
    layout = _layout(case)
    options = dict(gamma=case.gamma, priority_eta=case.eta, rescaling=case.rescaling)
    n = len(LENGTHS)
    records = {}
    for batched in (False, True):
        got: list[list[SequenceRecord]] = [[] for _ in range(n)]
        adder = make_env_adders(
            [got[j].append for j in range(n)], layout, batched=batched, **options
        )
        rng = np.random.default_rng(4)
        for j in range(n):
            adder.add_first(j, rng.normal(size=2))
        for t in range(30):
            ends = np.array([t % (j + 2) == j + 1 for j in range(n)])
            adder.add(
                rng.integers(3, size=n),
                rng.normal(size=n),
                rng.normal(size=(n, 2)),
                ends,
                np.zeros(n, bool),
                rng.normal(size=(n, 2, 3)).astype(np.float32),
                rng.normal(size=(n, 3)),
            )
            for j in np.flatnonzero(ends):
                adder.add_first(j, rng.normal(size=2))
        records[batched] = got
    for j in range(n):
        _assert_same(records[True][j], records[False][j])
