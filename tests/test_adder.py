"""Tests of `r2d2_agent.replay.adder.SequenceAdder`, R2D2's sequence adder (table-driven,
Acme style).

The adder names frames by id and hands each frame on once; `Recorder` collects the frames
and rebuilds each sequence's observations (`stack_frames`), so the tables compare the
observations a learner will see."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2_agent.math import RESCALE_EPS
from r2d2_agent.replay import SequenceAdder, SequenceLayout
from r2d2_agent.testing import SequenceRecorder

NB_ACTIONS = 16
FIELDS = (
    "obs",
    "burnin_mask",
    "state",
    "actions",
    "returns",
    "bootstrap_discount",
    "bootstrap_index",
    "mask",
)
EMITTED = (*FIELDS[1:], "frame_ids", "obs_mask")  # the fields a record carries


LAYOUT = {
    "frame_shape": (1,),
    "frame_dtype": np.float32,
    "input_sequence": 1,
    "state_size": 2,
    "burnin": 2,
    "input_length": 3,
    "multisteps": 2,
    "period": 2,
}
TARGETS = {"gamma": 0.5, "priority_eta": 0.9, "rescaling": True, "double_q": True}


def make_layout(**overrides):
    return SequenceLayout(**(LAYOUT | {k: v for k, v in overrides.items() if k in LAYOUT}))


def make_adder(sink, **overrides):
    targets = TARGETS | {k: v for k, v in overrides.items() if k in TARGETS}
    return SequenceAdder(sink, make_layout(**overrides), **targets)


class Recorder(SequenceRecorder):
    """`SequenceRecorder` with the table tests' view: `(fields, priority)` items, and
    observations `(T, *frame)` when S is 1."""

    def __call__(self, record):
        super().__call__(record)
        if self.input_sequence == 1:
            self.sequences[-1]["obs"] = self.sequences[-1]["obs"][:, 0]

    @property
    def items(self):
        return list(zip(self.sequences, self.priorities, strict=True))

    @property
    def seqs(self):
        return self.sequences


def q_of(t):
    """Deterministic acting q values of step t."""
    return np.linspace(-1.0, 1.0, NB_ACTIONS) * ((t % 5) - 2) + 0.1 * t


def run_episode(adder, length, terminated, obs_offset=0, next_q_last=None):
    """Plays s_j = obs_offset + j + 1, a_t = r_t = t + 1, state_t = full(t + 1)."""
    adder.add_first(np.array([obs_offset + 1.0], np.float32))
    for t in range(length):
        last = t == length - 1
        adder.add(
            t + 1,
            float(t + 1),
            np.array([obs_offset + t + 2.0], np.float32),
            terminated=last and terminated,
            truncated=last and not terminated,
            state=np.full((2, 2), t + 1.0),
            q_values=q_of(t),
            next_q_values=next_q_last if last else None,
        )


def row(obs, burnin_mask, state, actions, returns, disc, bidx, mask):
    return {
        "obs": obs,
        "burnin_mask": burnin_mask,
        "state": state,
        "actions": actions,
        "returns": returns,
        "bootstrap_discount": disc,
        "bootstrap_index": bidx,
        "mask": mask,
    }


# b=2, L=3, n=2, gamma=0.5; s_j = j+1, a_t = r_t = t+1; "state" is the fill value of
# the (2, 2) state passed with step max(q-b, 0).
Q0 = row(
    [0, 0, 1, 2, 3, 4, 5],
    [0, 0],
    1,
    [1, 2, 3],
    [2, 3.5, 5],
    [0.25, 0.25, 0.25],
    [2, 3, 4],
    [1, 1, 1],
)
TABLE = {
    "terminated_E7_period2": (
        {"period": 2},
        7,
        True,
        [
            Q0,
            row(
                [1, 2, 3, 4, 5, 6, 7],
                [1, 1],
                1,
                [3, 4, 5],
                [5, 6.5, 8],
                [0.25, 0.25, 0.25],
                [2, 3, 4],
                [1, 1, 1],
            ),
            row(
                [3, 4, 5, 6, 7, 8, 0],
                [1, 1],
                3,
                [5, 6, 7],
                [8, 9.5, 7],
                [0.25, 0, 0],
                [2, 3, 3],
                [1, 1, 1],
            ),
            row(
                [5, 6, 7, 8, 0, 0, 0],
                [1, 1],
                5,
                [7, 0, 0],
                [7, 0, 0],
                [0, 0, 0],
                [1, 1, 2],
                [1, 0, 0],
            ),
        ],
    ),
    "truncated_E7_period2": (
        {"period": 2},
        7,
        False,
        [
            Q0,
            row(
                [1, 2, 3, 4, 5, 6, 7],
                [1, 1],
                1,
                [3, 4, 5],
                [5, 6.5, 8],
                [0.25, 0.25, 0.25],
                [2, 3, 4],
                [1, 1, 1],
            ),
            row(
                [3, 4, 5, 6, 7, 8, 0],
                [1, 1],
                3,
                [5, 6, 7],
                [8, 9.5, 7],
                [0.25, 0.25, 0.5],
                [2, 3, 3],
                [1, 1, 1],
            ),
            row(
                [5, 6, 7, 8, 0, 0, 0],
                [1, 1],
                5,
                [7, 0, 0],
                [7, 0, 0],
                [0.5, 0, 0],
                [1, 1, 2],
                [1, 0, 0],
            ),
        ],
    ),
    "terminated_E7_period_eq_L": (
        {"period": 3},
        7,
        True,
        [
            Q0,
            row(
                [2, 3, 4, 5, 6, 7, 8],
                [1, 1],
                2,
                [4, 5, 6],
                [6.5, 8, 9.5],
                [0.25, 0.25, 0],
                [2, 3, 4],
                [1, 1, 1],
            ),
            row(
                [5, 6, 7, 8, 0, 0, 0],
                [1, 1],
                5,
                [7, 0, 0],
                [7, 0, 0],
                [0, 0, 0],
                [1, 1, 2],
                [1, 0, 0],
            ),
        ],
    ),
    "terminated_shorter_than_window": (
        {},
        2,
        True,
        [
            row(
                [0, 0, 1, 2, 3, 0, 0],
                [0, 0],
                1,
                [1, 2, 0],
                [2, 2, 0],
                [0, 0, 0],
                [2, 2, 2],
                [1, 1, 0],
            ),
        ],
    ),
    "truncated_shorter_than_window": (
        {},
        2,
        False,
        [
            row(
                [0, 0, 1, 2, 3, 0, 0],
                [0, 0],
                1,
                [1, 2, 0],
                [2, 2, 0],
                [0.25, 0.5, 0],
                [2, 2, 2],
                [1, 1, 0],
            ),
        ],
    ),
    "terminated_single_step": (
        {},
        1,
        True,
        [
            row(
                [0, 0, 1, 2, 0, 0, 0],
                [0, 0],
                1,
                [1, 0, 0],
                [1, 0, 0],
                [0, 0, 0],
                [1, 1, 2],
                [1, 0, 0],
            ),
        ],
    ),
    "no_burnin_n1_period1_truncated": (
        {"burnin": 0, "input_length": 2, "multisteps": 1, "period": 1},
        3,
        False,
        [
            row([1, 2, 3], [], 1, [1, 2], [1, 2], [0.5, 0.5], [1, 2], [1, 1]),
            row([2, 3, 4], [], 2, [2, 3], [2, 3], [0.5, 0.5], [1, 2], [1, 1]),
            row([3, 4, 0], [], 3, [3, 0], [3, 0], [0.5, 0], [1, 1], [1, 0]),
        ],
    ),
}


@pytest.mark.parametrize("name", list(TABLE))
def test_emitted_sequences_table(name):
    overrides, length, terminated, expected = TABLE[name]
    rec = Recorder()
    adder = make_adder(rec, **overrides)
    run_episode(adder, length, terminated)
    assert len(rec.seqs) == len(expected)
    spec = make_layout(**overrides).field_spec()
    for k, (got, want) in enumerate(zip(rec.seqs, expected, strict=True)):
        assert set(got) == {*EMITTED, "obs"}
        for field, (shape, dtype) in spec.items():
            assert got[field].shape == shape and got[field].dtype == dtype, (k, field)
        np.testing.assert_array_equal(got["obs"][:, 0], want["obs"], err_msg=f"{k} obs")
        np.testing.assert_array_equal(got["state"], np.full((2, 2), want["state"]))
        for field in FIELDS[3:] + ("burnin_mask",):
            np.testing.assert_array_equal(got[field], want[field], err_msg=f"{k} {field}")


def test_emitted_when_look_ahead_complete():
    rec = Recorder()
    adder = make_adder(rec)  # b=2, L=3, n=2: window 0 needs s_4 and Q(s_4).
    adder.add_first(np.array([1.0], np.float32))
    counts = []
    for t in range(8):
        adder.add(0, 0.0, np.array([t + 2.0], np.float32), False, False, np.zeros((2, 2)), q_of(t))
        counts.append(len(rec.seqs))
    assert counts == [0, 0, 0, 0, 1, 1, 2, 2]


def test_next_q_values_allow_emitting_one_step_earlier():
    rec = Recorder()
    adder = make_adder(rec)
    adder.add_first(np.array([1.0], np.float32))
    counts = []
    for t in range(6):
        adder.add(
            0,
            0.0,
            np.array([t + 2.0], np.float32),
            False,
            False,
            np.zeros((2, 2)),
            q_of(t),
            next_q_values=q_of(t + 1),
        )
        counts.append(len(rec.seqs))
    assert counts == [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize(("burnin", "period"), [(2, 2), (3, 1), (5, 2), (0, 4)])
def test_stored_state_is_state_passed_with_first_real_step(burnin, period):
    rec = Recorder()
    adder = make_adder(rec, burnin=burnin, input_length=4, multisteps=1, period=period)
    states = np.random.default_rng(burnin).normal(size=(13, 2, 2)).astype(np.float32)
    adder.add_first(np.array([1.0], np.float32))
    for t in range(13):
        adder.add(0, 0.0, np.array([t + 2.0], np.float32), t == 12, False, states[t], q_of(t))
    starts = list(range(0, 13, period))
    assert len(rec.seqs) == len(starts)
    for q, seq in zip(starts, rec.seqs, strict=True):
        np.testing.assert_array_equal(seq["state"], states[max(q - burnin, 0)])


def test_no_sequence_crosses_episode_boundary():
    rec = Recorder()
    adder = make_adder(rec)
    run_episode(adder, 7, terminated=True)
    first = len(rec.seqs)
    run_episode(adder, 5, terminated=False, obs_offset=100)
    assert first == 4 and len(rec.seqs) == 4 + 3
    for k, seq in enumerate(rec.seqs):
        real = seq["obs"][seq["obs"] != 0]
        assert np.all(real < 100) if k < first else np.all(real > 100)
    # The second episode starts fresh: left-padded burn-in, first state of episode 2.
    np.testing.assert_array_equal(rec.seqs[first]["obs"][:, 0], [0, 0, 101, 102, 103, 104, 105])


def test_buffer_stays_bounded_over_long_episode():
    count = [0]
    adder = make_adder(lambda record: count.__setitem__(0, count[0] + 1))
    adder.add_first(np.array([1.0], np.float32))
    state, q, peak = np.zeros((2, 2)), q_of(0), 0
    for t in range(10_000):
        adder.add(1, 1.0, np.array([t + 2.0], np.float32), t == 9_999, False, state, q)
        peak = max(peak, adder.buffer_length)
    assert peak <= 2 + 3 + 2 + 2
    assert count[0] == 5_000 and adder.buffer_length == 0


def _h(x):
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + RESCALE_EPS * x


def _h_inv(x):
    eps = RESCALE_EPS
    return math.copysign(
        ((math.sqrt(1 + 4 * eps * (abs(x) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1, x
    )


def reference_sequences(ep, cfg):
    """Brute-force sequences and priorities from a whole recorded episode."""
    b, L, n, P, gamma = (
        cfg["burnin"],
        cfg["input_length"],
        cfg["multisteps"],
        cfg["period"],
        cfg["gamma"],
    )
    E, obs, qs = len(ep["actions"]), ep["obs"], ep["qs"]
    out = []
    for q in range(0, E, P):
        seq = {
            "obs": [obs[j] if 0 <= j <= E else 0.0 for j in range(q - b, q + L + n)],
            "burnin_mask": [float(q - b + i >= 0) for i in range(b)],
            "state": ep["states"][max(q - b, 0)],
            "actions": [],
            "returns": [],
            "bootstrap_discount": [],
            "bootstrap_index": [],
            "mask": [],
        }
        deltas = []
        for i in range(L):
            t = q + i
            if t >= E:
                for f, v in (
                    ("actions", 0),
                    ("returns", 0),
                    ("bootstrap_discount", 0),
                    ("bootstrap_index", i),
                    ("mask", 0),
                ):
                    seq[f].append(v)
                continue
            k = min(n, E - t)
            g = sum(gamma**j * ep["rewards"][t + j] for j in range(k))
            d = 0.0 if ep["terminated"] and t + k == E else gamma**k
            for f, v in (
                ("actions", ep["actions"][t]),
                ("returns", g),
                ("bootstrap_discount", d),
                ("bootstrap_index", i + k),
                ("mask", 1),
            ):
                seq[f].append(v)
            qb = qs[t + k]
            v = qb[int(np.argmax(qb))]
            y = _h(g + d * _h_inv(v)) if cfg["rescaling"] else g + d * v
            deltas.append(abs(y - qs[t][ep["actions"][t]]))
        eta = cfg["priority_eta"]
        out.append((seq, eta * max(deltas) + (1 - eta) * sum(deltas) / len(deltas)))
    return out


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(0, 3),
    length=st.integers(1, 4),
    n=st.integers(1, 3),
    data=st.data(),
    episode=st.integers(1, 14),
    terminated=st.booleans(),
    give_next_q=st.booleans(),
    rescaling=st.booleans(),
    double_q=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_brute_force_reference_incl_priority(
    b, length, n, data, episode, terminated, give_next_q, rescaling, double_q, seed
):
    cfg = {
        "burnin": b,
        "input_length": length,
        "multisteps": n,
        "period": data.draw(st.integers(1, length)),
        "gamma": 0.9,
        "priority_eta": 0.9,
        "rescaling": rescaling,
        "double_q": double_q,
    }
    rng = np.random.default_rng(seed)
    qs = list(rng.normal(size=(episode + 1, 4)) * 3)
    ep = {
        "obs": [float(j + 1) for j in range(episode + 1)],
        "qs": qs,
        "actions": [int(a) for a in rng.integers(0, 4, episode)],
        "rewards": list(rng.normal(size=episode) * 5),
        "terminated": terminated,
        "states": list(rng.normal(size=(episode, 2, 3)).astype(np.float32)),
    }
    if not terminated and not give_next_q:
        qs[episode] = qs[episode - 1]  # Documented fallback: Q(s_{E-1}) stands in.
    rec = Recorder()
    adder = make_adder(rec, state_size=3, **cfg)
    adder.add_first(np.array([1.0], np.float32))
    for t in range(episode):
        last = t == episode - 1
        adder.add(
            ep["actions"][t],
            ep["rewards"][t],
            np.array([t + 2.0], np.float32),
            last and terminated,
            last and not terminated,
            ep["states"][t],
            qs[t],
            next_q_values=qs[t + 1] if last and give_next_q else None,
        )
    expected = reference_sequences(ep, cfg)
    assert len(rec.items) == len(expected)
    for (got, prio), (want, want_prio) in zip(rec.items, expected, strict=True):
        np.testing.assert_allclose(got["obs"][:, 0], want["obs"])
        for field in FIELDS[1:]:
            np.testing.assert_allclose(
                got[field], np.asarray(want[field], np.float32), rtol=1e-6, atol=1e-6, err_msg=field
            )
        assert prio == pytest.approx(want_prio, rel=1e-9, abs=1e-9)


def test_uint8_observations_keep_dtype_and_zero_padding():
    rec = Recorder()
    adder = make_adder(rec, frame_shape=(2, 2), frame_dtype=np.uint8, state_size=0)
    adder.add_first(np.full((2, 2), 7, np.uint8))
    adder.add(0, 1.0, np.full((2, 2), 9, np.uint8), True, False, None, np.zeros(3))
    (seq,) = rec.seqs
    assert seq["obs"].dtype == np.uint8 and seq["obs"].shape == (7, 2, 2)
    assert seq["state"].shape == (2, 0)
    np.testing.assert_array_equal(seq["obs"][:, 0, 0], [0, 0, 7, 9, 0, 0, 0])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("period", 0),
        ("period", 4),
        ("burnin", -1),
        ("input_length", 0),
        ("multisteps", 0),
        ("gamma", 1.5),
        ("priority_eta", -0.1),
        ("state_size", -1),
        ("frame_shape", (-1,)),
        ("input_sequence", 0),
        ("frame_dtype", "not-a-dtype"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(name, value):
    with pytest.raises(ValueError, match=name) as info:
        make_adder(Recorder(), **{name: value})
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_add_before_add_first_raises():
    adder = make_adder(Recorder())
    with pytest.raises(RuntimeError):
        adder.add(0, 0.0, np.ones(1), False, False, np.zeros((2, 2)), np.zeros(3))


def _adder_mid_episode(rec):
    """An adder one step into its second episode (after a finished one-step episode)."""
    adder = make_adder(rec)
    run_episode(adder, 1, terminated=False)  # Finished episodes allow a new add_first.
    adder.add_first(np.ones(1))
    adder.add(0, 0.0, np.ones(1), False, False, np.zeros((2, 2)), q_of(0))
    return adder


def test_add_first_mid_episode_raises():
    adder = _adder_mid_episode(Recorder())
    with pytest.raises(RuntimeError):
        adder.add_first(np.ones(1))


def test_reset_discards_the_unfinished_episode():
    rec = Recorder()
    adder = _adder_mid_episode(rec)
    with pytest.raises(RuntimeError):
        adder.add_first(np.ones(1))
    adder.reset()
    adder.add_first(np.ones(1))
    assert len(rec.seqs) == 1 and adder.buffer_length == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"next_frame": np.ones(2)}, "frame"),
        ({"state": np.zeros((2, 3))}, "state"),
        ({"q_values": np.zeros((2, 3))}, "q_values"),
        ({"action": 5}, "action"),
    ],
)
def test_add_rejects_mismatched_shapes(kwargs, match):
    adder = make_adder(Recorder())
    adder.add_first(np.ones(1))
    args = {
        "action": 0,
        "reward": 0.0,
        "next_frame": np.ones(1),
        "terminated": False,
        "truncated": False,
        "state": np.zeros((2, 2)),
        "q_values": np.zeros(3),
    }
    with pytest.raises(ValueError, match=match):
        adder.add(**(args | kwargs))


def test_every_frame_is_handed_on_once_in_id_order():
    rec = Recorder()
    adder = make_adder(rec)
    run_episode(adder, 9, terminated=True)
    run_episode(adder, 4, terminated=False, obs_offset=100)
    # 10 + 5 observations; the Recorder also checks that no frame comes twice or late
    assert rec.frame_log == list(range(15))


def test_frames_of_an_episode_dropped_by_reset_are_never_referenced():
    rec = Recorder()
    adder = make_adder(rec)
    adder.add_first(np.array([1.0], np.float32))
    adder.add(0, 0.0, np.array([2.0], np.float32), False, False, np.zeros((2, 2)), q_of(0))
    adder.reset()  # two frames (ids 0, 1) dropped with their episode
    run_episode(adder, 3, terminated=True, obs_offset=10)
    assert rec.frame_log == [2, 3, 4, 5]
    assert all(seq["frame_ids"].max() >= 2 for seq in rec.seqs)


@pytest.mark.parametrize("stack", [2, 3])
def test_stacked_observations_are_the_actors_stacks(stack):
    """Observation j of a window stacks frames j-S+1 .. j of the episode, zeros before
    its first frame, as the actor stacked them; padding after the end is all zeros."""
    rec = Recorder(input_sequence=stack)
    adder = make_adder(rec, input_sequence=stack, frame_shape=(1,))
    run_episode(adder, 6, terminated=True)
    frames = [float(j + 1) for j in range(7)]  # s_j = j + 1, E = 6
    b, length, n, period = 2, 3, 2, 2
    for q, seq in zip(range(0, 6, period), rec.seqs, strict=True):
        for p in range(b + length + n):
            j = q - b + p
            if 0 <= j <= 6:
                want = [frames[i] if i >= 0 else 0.0 for i in range(j - stack + 1, j + 1)]
            else:
                want = [0.0] * stack
            np.testing.assert_array_equal(seq["obs"][p, :, 0], want, err_msg=f"q={q} p={p}")


def test_scalar_math_matches_the_numpy_functions_bit_for_bit() -> None:
    """The adder's per-float rescaling and argmax give numpy's bits (NaN, inf, ±0 too)."""
    from r2d2_agent.math import inverse_rescale, inverse_rescale_float, rescale, rescale_float
    from r2d2_agent.replay.adder import _argmax

    rng = np.random.default_rng(0)
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-300, -1e300, 1.0, -1.0]
    values = np.concatenate([rng.normal(size=2000) * 10.0 ** rng.integers(-8, 9, 2000), special])
    for scalar, vector in ((rescale_float, rescale), (inverse_rescale_float, inverse_rescale)):
        got = np.array([scalar(x) for x in values.tolist()])
        with np.errstate(invalid="ignore"):
            want = vector(values)
        same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), values[~same]
    rows = rng.integers(-2, 3, (500, 4)).astype(np.float64)
    rows[rng.random(rows.shape) < 0.05] = np.nan
    for row in rows:
        assert _argmax(row.tolist()) == np.argmax(row)


# drop_covered_windows ------------------------------------------------------------------

END_WINDOWS = [  # (L, period, next_start, E) -> the end's windows: all, without covered ones
    ((4, 2, 0, 3), [0, 2], [0]),  # one window holds the whole episode
    ((4, 2, 0, 4), [0, 2], [0]),  # ... exactly
    ((4, 2, 0, 5), [0, 2, 4], [0, 2]),  # step 4 is only in window 2
    ((4, 2, 2, 4), [2], []),  # window 0 (emitted) trained steps 0-3 already
    ((4, 2, 2, 5), [2, 4], [2]),
    ((4, 4, 4, 5), [4], [4]),  # no overlap: nothing is covered
    ((6, 2, 0, 3), [0, 2], [0]),
    ((6, 2, 2, 7), [2, 4, 6], [2]),  # window 0 trains 0-5, window 2 the rest
    ((5, 1, 3, 8), [3, 4, 5, 6, 7], [3]),
]


@pytest.mark.parametrize(("where", "every", "uncovered"), END_WINDOWS)
def test_end_window_starts_by_hand(where, every, uncovered):
    length, period, next_start, end = where
    layout = make_layout(input_length=length, period=period)
    dropping = SequenceLayout(
        **{**LAYOUT, "input_length": length, "period": period, "drop_covered_windows": True}
    )
    assert layout.end_window_starts(next_start, end) == every
    assert dropping.end_window_starts(next_start, end) == uncovered


def _uncovered_windows(length: int, period: int, episode: int) -> list[int]:
    """Brute force: the windows of an episode of `episode` steps (window q trains steps
    q .. q + L - 1 below `episode`) but those whose steps earlier windows all train."""
    kept, trained = [], set()
    for start in range(0, episode, period):
        steps = set(range(start, min(start + length, episode)))
        if not steps <= trained:
            kept.append(start)
            trained |= steps
    return kept


def _play_dropping(drop: bool, layout: dict, episode: int, terminated: bool) -> list[dict]:
    rec = Recorder()
    adder = SequenceAdder(
        rec, SequenceLayout(**{**LAYOUT, **layout, "drop_covered_windows": drop}), **TARGETS
    )
    run_episode(adder, episode, terminated)
    return rec.seqs


@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"input_length": 4, "multisteps": 1},
        {"burnin": 0, "input_length": 4, "multisteps": 3, "period": 1},
        {"burnin": 1, "input_length": 6, "period": 3},
        {"burnin": 3, "input_length": 8, "multisteps": 1, "period": 4},
        {"input_length": 5, "period": 5},
    ],
    ids=str,
)
@pytest.mark.parametrize("terminated", [True, False], ids=["terminated", "truncated"])
def test_drop_covered_windows_keeps_every_window_that_trains_a_new_step(layout, terminated):
    length = layout.get("input_length", LAYOUT["input_length"])
    period = layout.get("period", LAYOUT["period"])
    for episode in range(1, 15):
        every = _play_dropping(False, layout, episode, terminated)
        kept = _play_dropping(True, layout, episode, terminated)
        starts = [int(seq["actions"][0]) - 1 for seq in kept]  # a_t = t + 1
        assert starts == _uncovered_windows(length, period, episode), episode
        trained = {
            start + i
            for start, seq in zip(starts, kept, strict=True)
            for i in np.flatnonzero(seq["mask"])
        }
        assert trained == set(range(episode)), episode  # every step still trained
        # the windows kept are the ones stored without dropping, field for field
        by_start = {int(seq["actions"][0]) - 1: seq for seq in every}
        for start, seq in zip(starts, kept, strict=True):
            for name in EMITTED:
                np.testing.assert_array_equal(seq[name], by_start[start][name], err_msg=name)
