"""Tests of the recurrent-state diagnostic (`r2d2_agent.roles.state_discrepancy`):
`state_discrepancy` against a brute-force computation that steps the numpy network over
every window by hand, the stored state's index, the zero-state variants, the
`EpisodeRecorder` tee, the learner's and the agent's entry points, and the plot.

The numpy tests use a tiny value network (`make_config`: LSTM 8, dense 8) with random
weights whose value bias keeps the largest Q-value away from 0 (the discrepancy divides
by it), and episodes of random frames.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from r2d2_agent.networks.numpy_net import NumpyNetwork, weight_layout
from r2d2_agent.roles import R2D2Actor
from r2d2_agent.roles.state_discrepancy import (
    VARIANTS,
    EpisodeRecorder,
    RecordedEpisode,
    StateDiscrepancy,
    state_discrepancy,
)


def numpy_network(config, seed=0):
    """A `NumpyNetwork` with random weights; the value bias is 3 (Q-values near 3); with
    `normalize_rewards` its reward statistics give a reward scale of about 3."""
    rng = np.random.default_rng(seed)
    weights = []
    for name, shape in weight_layout(config):
        w = rng.normal(0.0, 0.5, shape).astype(np.float32)
        if name == "value/bias":
            w[:] = 3.0
        if name.startswith("reward_statistics/"):  # 100 rewards of mean square 9: scale 3
            w = np.array(100.0 if name.endswith("count") else 9.0)
        weights.append(w)
    return NumpyNetwork(config, weights)


def random_episode(config, rng, length, terminated=True):
    """An episode of random frames, actions and rewards whose stored states are random
    (not the network's): every stored-state start is off, each by its own amount."""
    return RecordedEpisode(
        observations=rng.normal(size=(length + 1, *config.input_shape)).astype(np.float32),
        actions=rng.integers(config.nb_actions, size=length),
        rewards=rng.normal(size=length),
        states=rng.normal(0.0, 0.5, size=(length, 2, config.state_size)).astype(np.float32),
        terminated=terminated,
    )


def played_episodes(config, network, lengths, seed=0):
    """Episodes an `R2D2Actor` with `network` played on random frames, recorded by an
    `EpisodeRecorder` in the actor's adder's place: the stored states are the network's
    own, so they are the true states while its weights stay as they are."""
    rng = np.random.default_rng(seed)
    recorder = EpisodeRecorder(None, keep=len(lengths))
    actor = R2D2Actor(config, network, recorder, epsilon=0.5, seed=seed)
    for length in lengths:
        actor.observe_first(rng.normal(size=config.input_shape))
        for t in range(length):
            action = actor.select_action()
            last = t == length - 1
            actor.observe(
                action, float(rng.normal()), rng.normal(size=config.input_shape), last, False
            )
    assert len(recorder.episodes) == len(lengths)
    return recorder.episodes


def brute_force(network, config, episodes, burnin):
    """Mean and median ΔQ per trained step and variant, one window and one step at a
    time.

    Windows start at q = 0, P, 2P, ... < E (P = `config.period`); the stored state with
    burn-in is the actor's at step max(q - b, 0), without burn-in at step q; a window's
    trained steps are q .. min(q + L, E) - 1.
    """
    b, length, stack, units = burnin, config.input_length, config.input_sequence, config.state_size
    with_prev = config.enable_prev_action_reward
    scale = network.reward_scale if config.normalize_rewards else 1.0

    def observation(episode, j):
        frames = [
            episode.observations[k] if k >= 0 else np.zeros(config.input_shape)
            for k in range(j - stack + 1, j + 1)
        ]
        return np.stack(frames).astype(np.float32)[None]

    def step(episode, j, state):
        extra = ()
        if with_prev:
            extra = (
                np.array([episode.actions[j - 1] if j > 0 else -1]),
                np.array([episode.rewards[j - 1] / scale if j > 0 else 0.0], np.float32),
            )
        q, state = network.step(observation(episode, j), state, *extra)
        return q[0].astype(np.float64), state

    values = {name: [[] for _ in range(length)] for name in VARIANTS}  # per step
    for episode in episodes:
        steps = episode.length
        truth, state = [], np.zeros((1, 2, units), np.float32)
        for j in range(steps):
            q, state = step(episode, j, state)
            truth.append(q)
        for q0 in range(0, steps, config.period):
            first = max(q0 - b, 0)
            zero = np.zeros((1, 2, units), np.float32)
            starts = {
                "stored_burnin": (episode.states[first][None], first),
                "stored": (episode.states[q0][None], q0),
                "zero_burnin": (zero, first),
                "zero": (zero, q0),
            }
            for name, (state, begin) in starts.items():
                for j in range(begin, q0):  # burn-in
                    _, state = step(episode, j, state)
                for t in range(min(length, steps - q0)):
                    q, state = step(episode, q0 + t, state)
                    true_q = truth[q0 + t]
                    delta = np.linalg.norm(q - true_q) / abs(true_q.max())
                    values[name][t].append(delta)
    means = {name: np.array([np.mean(v) for v in values[name]]) for name in VARIANTS}
    medians = {name: np.array([np.median(v) for v in values[name]]) for name in VARIANTS}
    counts = np.array([len(v) for v in values[VARIANTS[0]]])
    return means, medians, counts


@pytest.mark.parametrize(
    "changes, burnin",
    [
        ({}, None),  # b = 2, L = 4, period 2
        ({"sequence_period": 3, "input_sequence": 2}, 3),  # stacked frames, a longer burn-in
        ({"enable_prev_action_reward": True, "input_length": 5}, 0),  # no burn-in at all
        ({"enable_prev_action_reward": True, "normalize_rewards": True}, None),
    ],
    ids=[
        "preset-like",
        "stacked-period3-burnin3",
        "prev-action-reward-burnin0",
        "prev-reward-normalized",
    ],
)
def test_by_step_matches_stepping_the_numpy_network_by_hand(make_config, changes, burnin):
    config = make_config(input_shape=(3,), **changes)
    network = numpy_network(config)
    if config.normalize_rewards:
        assert network.reward_scale == pytest.approx(3.0, rel=1e-2)
    rng = np.random.default_rng(1)
    # Lengths around the window: shorter than the burn-in, than a window, and several.
    episodes = [
        random_episode(config, rng, 1),
        random_episode(config, rng, 3, terminated=False),
        random_episode(config, rng, 11),
        random_episode(config, rng, 17, terminated=False),
    ]
    result = state_discrepancy(network, config, episodes, burnin)
    expected, medians, counts = brute_force(
        network, config, episodes, config.burnin if burnin is None else burnin
    )
    assert result.counts.tolist() == counts.tolist()
    assert result.nb_sequences == sum(len(range(0, e.length, config.period)) for e in episodes)
    for name in VARIANTS:
        np.testing.assert_allclose(result.by_step[name], expected[name], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(result.median_by_step[name], medians[name], rtol=1e-4, atol=1e-6)
    # Random stored states are off: every variant but none is far from the truth here.
    assert all(result.by_step[name][-1] > 1e-3 for name in VARIANTS)


def test_stored_true_states_give_no_discrepancy_with_or_without_burnin(make_config):
    config = make_config(input_shape=(3,), input_sequence=2)
    network = numpy_network(config)
    episodes = played_episodes(config, network, [23, 9, 30])
    result = state_discrepancy(network, config, episodes, burnin=0)
    for name in ("stored", "stored_burnin"):  # burnin=0: both start at step q
        np.testing.assert_allclose(result.by_step[name], 0.0, atol=1e-5)
    # A zero state at a window's start is off (the windows at q > 0 dominate).
    assert result.by_step["zero"][0] > 1e-3
    np.testing.assert_allclose(result.by_step["zero_burnin"], result.by_step["zero"])
    # With burn-in, the stored state (the true state at max(q - b, 0)) is still exact.
    with_burnin = state_discrepancy(network, config, episodes)
    np.testing.assert_allclose(with_burnin.by_step["stored_burnin"], 0.0, atol=1e-5)


def test_the_stored_state_is_taken_at_the_window_start_minus_the_burnin(make_config):
    config = make_config(input_shape=(3,))
    network = numpy_network(config)
    (episode,) = played_episodes(config, network, [20])
    b = config.burnin

    def with_states(states):
        return RecordedEpisode(
            episode.observations, episode.actions, episode.rewards, states, episode.terminated
        )

    # States shifted one step later (index t holds the state of t + 1): the stored state at
    # max(q - b, 0) is then off, but the one at step q, which burn-in 0 uses, also is.
    shifted = with_states(np.concatenate([episode.states[1:], episode.states[-1:]]))
    assert state_discrepancy(network, config, [shifted]).summary()["stored_burnin_mean"] > 1e-3
    # Only the states at the burn-in starts max(q - b, 0) kept true, all others garbage:
    # the burn-in variant is exact, the no-burn-in one (stored state at q) is not.
    garbage = np.full_like(episode.states, 5.0)
    starts = {max(q - b, 0) for q in range(0, episode.length, config.period)}
    garbage[sorted(starts)] = episode.states[sorted(starts)]
    result = state_discrepancy(network, config, [with_states(garbage)])
    np.testing.assert_allclose(result.by_step["stored_burnin"], 0.0, atol=1e-5)
    assert result.summary()["stored_first"] > 1e-3


def test_zero_state_with_a_burnin_reaching_the_episode_start_is_exact(make_config):
    config = make_config(input_shape=(3,))
    network = numpy_network(config)
    episodes = played_episodes(config, network, [12, 7])
    # Every window's burn-in reaches back to s_0: the zero state there is the true one.
    result = state_discrepancy(network, config, episodes, burnin=12)
    np.testing.assert_allclose(result.by_step["zero_burnin"], 0.0, atol=1e-5)
    assert result.summary()["zero_mean"] > 1e-3  # windows at q > 0 from a zero state


def test_summary_has_mean_first_and_last_per_variant():
    counts = np.array([2, 2, 1, 0])
    result = StateDiscrepancy(
        by_step={
            name: np.array([1.0, 2.0, 4.0, np.nan]) * (i + 1) for i, name in enumerate(VARIANTS)
        },
        median_by_step={name: np.zeros(4) for name in VARIANTS},
        counts=counts,
        burnin=2,
        input_length=4,
        period=2,
        nb_sequences=2,
        nb_episodes=1,
    )
    summary = result.summary()
    assert summary["stored_burnin_first"] == 1.0
    assert summary["stored_burnin_last"] == 4.0  # the last step a sequence reaches
    assert summary["stored_burnin_mean"] == pytest.approx((2 * 1 + 2 * 2 + 4) / 5)
    assert summary["zero_last"] == 16.0
    assert len(summary) == 3 * len(VARIANTS)


class _ListAdder:
    """Counts the calls an adder gets."""

    def __init__(self):
        self.calls = []
        self.layout = "the adder's layout"

    def reset(self):
        self.calls.append("reset")

    def add_first(self, frame):
        self.calls.append("add_first")

    def add(self, *args):
        self.calls.append("add")


def test_recorder_keeps_the_last_episodes_one_every_n_and_passes_everything_on():
    inner = _ListAdder()
    recorder = EpisodeRecorder(inner, keep=2, every=3)
    state = np.zeros((2, 4), np.float32)
    for episode in range(8):  # lengths 1 .. 8; episodes 0, 3, 6 are recorded
        recorder.reset()
        recorder.add_first(np.full(2, episode * 100.0))
        for t in range(episode + 1):
            last = t == episode
            recorder.add(
                t % 2,
                float(t),
                np.full(2, episode * 100.0 + t + 1),
                last,
                False,
                state + t,
                np.zeros(2),
            )
    # An episode dropped mid-way (episode 9, recorded as the 10th start) is not kept.
    recorder.reset()
    recorder.add_first(np.zeros(2))
    recorder.add(0, 0.0, np.zeros(2), False, False, state, np.zeros(2))
    recorder.reset()
    kept = recorder.episodes
    assert [e.length for e in kept] == [4, 7]  # episodes 3 and 6
    assert recorder.episodes_started == 9
    six = kept[1]
    assert six.observations[:, 0].tolist() == [600.0 + t for t in range(8)]
    assert six.actions.tolist() == [t % 2 for t in range(7)]
    assert six.rewards.tolist() == [float(t) for t in range(7)]
    assert six.states[:, 0, 0].tolist() == [float(t) for t in range(7)]
    assert six.terminated
    assert inner.calls.count("add_first") == 9
    assert inner.calls.count("add") == sum(range(1, 9)) + 1
    assert recorder.layout == "the adder's layout"  # the rest is the adder's


@pytest.mark.parametrize(
    "kwargs, message",
    [({"keep": 0}, "keep"), ({"every": 0}, "every"), ({"every": 1.5}, "every")],
)
def test_recorder_rejects_bad_keep_and_every(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EpisodeRecorder(None, **kwargs)


def test_bad_input_is_named(make_config):
    config = make_config(input_shape=(3,))
    network = numpy_network(config)
    episode = random_episode(config, np.random.default_rng(0), 5)
    with pytest.raises(ValueError, match="lstm_units"):
        state_discrepancy(network, config.replace(lstm_units=0), [episode])
    with pytest.raises(ValueError, match="burnin"):
        state_discrepancy(network, config, [episode], burnin=-1)
    with pytest.raises(ValueError, match="empty"):
        state_discrepancy(network, config, [])
    with pytest.raises(ValueError, match="input_shape"):
        state_discrepancy(network, config.replace(input_shape=(4,)), [episode])
    with pytest.raises(TypeError, match="unroll"):
        state_discrepancy(object(), config, [episode])
    with pytest.raises(ValueError, match="observations"):
        RecordedEpisode(np.zeros((5, 3)), [0] * 5, [0.0] * 5, np.zeros((5, 2, 8)), True)


def test_the_plot_writes_a_png(tmp_path, make_config):
    from r2d2_agent.plot import plot_state_discrepancy

    config = make_config(input_shape=(3,))
    network = numpy_network(config)
    result = state_discrepancy(network, config, played_episodes(config, network, [15]))
    path = plot_state_discrepancy(result, tmp_path / "figs" / "discrepancy.png")
    with open(path, "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "figs").iterdir()) == [tmp_path / "figs" / "discrepancy.png"]
    median = plot_state_discrepancy(result, tmp_path / "median.png", statistic="median")
    assert os.path.getsize(median) > 0
    with pytest.raises(ValueError, match="statistic"):
        plot_state_discrepancy(result, tmp_path / "x.png", statistic="max")


def test_the_agent_records_training_episodes_and_the_learner_measures_them(
    make_config, make_cartpole
):
    from r2d2_agent import R2D2Agent

    config = make_config(memory_warmup=4, train_interval=2)
    agent = R2D2Agent(config)
    agent.compile()
    with pytest.raises(RuntimeError, match="record_episodes"):
        agent.state_discrepancy()
    recorder = agent.record_episodes(keep=3, every=2)
    agent.fit(make_cartpole(), nb_steps=160, verbose=0)
    assert agent.learner.updates > 0 and len(recorder.episodes) == 3
    assert recorder.episodes_started >= 6
    result = agent.state_discrepancy()
    # The learner's numpy pass and its Keras network (`unroll`, as it trains) agree.
    expected = state_discrepancy(agent.learner.online, config, recorder.episodes)
    for name in VARIANTS:
        np.testing.assert_allclose(
            result.by_step[name], expected.by_step[name], rtol=1e-3, atol=1e-5
        )
    # The training adder still got every step: sequences reached the replay.
    assert agent.learner.sequences_added > 0
    longer = agent.state_discrepancy(burnin=6)
    assert longer.burnin == 6 and longer.nb_sequences == result.nb_sequences


def test_small_batches_give_the_same_result(make_config):
    config = make_config(input_shape=(3,), input_sequence=2)
    network = numpy_network(config)
    rng = np.random.default_rng(3)
    episodes = [random_episode(config, rng, n) for n in (2, 9, 14)]
    whole = state_discrepancy(network, config, episodes)
    # One window, one episode and one time step per network call.
    tiny = state_discrepancy(network, config, episodes, max_batch_bytes=1)
    # The same up to float32 rounding: another batch size sums the matrix products in
    # another order (1.6e-5 apart with numpy 2.4's BLAS), and a discrepancy is a
    # difference of nearby Q-values, which keeps the rounding and not the magnitude.
    for name in VARIANTS:
        np.testing.assert_allclose(tiny.by_step[name], whole.by_step[name], rtol=1e-4)
