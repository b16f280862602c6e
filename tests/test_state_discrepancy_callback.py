"""Tests of `StateDiscrepancyCallback` (the recurrent-state diagnostic of a manager run)
and of the episode files it ships from the actors to the learner (`write_episodes`,
`read_episodes`).

Most tests drive the callback's hooks in this process: a vector actor of two envs with a
numpy network stands in for an actor process, a stub learner whose `state_discrepancy` is
the pure function stands in for the learner. One real manager run (one actor process of
two envs, the tiny CartPole config, 600 env steps) checks the whole path: recorders in
the actor, files, the learner's measurement, JSON, plot and metrics.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from test_state_discrepancy import numpy_network, random_episode

from r2d2_agent.callbacks import RunLogCallback, StateDiscrepancyCallback
from r2d2_agent.callbacks.state_discrepancy import RESULT_FILE, RESULT_PLOT
from r2d2_agent.roles import R2D2VectorActor
from r2d2_agent.roles.state_discrepancy import (
    VARIANTS,
    read_episodes,
    state_discrepancy,
    write_episodes,
)

CARTPOLE = functools.partial(gym.make, "CartPole-v1")


class CountingVectorAdder:
    """A vector adder that counts the calls it gets per env (the recorders are taps: the
    shared adder must still get every call)."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.calls = [{"reset": 0, "add_first": 0, "add": 0} for _ in range(num_envs)]

    def reset(self, env):
        self.calls[env]["reset"] += 1

    def add_first(self, env, frame):
        self.calls[env]["add_first"] += 1

    def add(self, actions, *args):
        assert len(actions) == self.num_envs
        for calls in self.calls:
            calls["add"] += 1


def play(vector, rng, lengths_per_env, callback, runner):
    """Plays episodes of the given lengths in each env of `vector` on random frames,
    calling the callback's episode-end hook after each episode as the runner does; an
    env whose episodes are done plays on in an episode that does not end."""
    shape = vector.config.input_shape
    remaining = [list(lengths) for lengths in lengths_per_env]
    steps = [0] * vector.num_envs
    for env in range(vector.num_envs):
        vector.observe_first(env, rng.normal(size=shape))
    while any(remaining):
        actions = vector.select_actions()
        ends = []
        for env in range(vector.num_envs):
            steps[env] += 1
            runner.steps += 1
            ends.append(bool(remaining[env]) and steps[env] == remaining[env][0])
        frames = [rng.normal(size=shape) for _ in range(vector.num_envs)]
        n = vector.num_envs
        vector.observe_all(actions.tolist(), [1.0] * n, frames, ends, [False] * n)
        for env, end in enumerate(ends):
            if end:
                remaining[env].pop(0)
                steps[env] = 0
                callback.on_r2d2_actor_episode_end(0, runner, None)
                vector.observe_first(env, rng.normal(size=shape))


# ----------------------------------------------------------------- episode files --
def test_episodes_round_trip_through_a_file_with_their_meta(tmp_path, make_config):
    config = make_config(input_shape=(3,))
    rng = np.random.default_rng(0)
    episodes = [random_episode(config, rng, 5), random_episode(config, rng, 1, terminated=False)]
    path = write_episodes(tmp_path / "a" / "actor-0.npz", episodes, actor=0, env=[0, 1])
    read, meta = read_episodes(path)
    assert len(read) == 2
    for got, want in zip(read, episodes, strict=True):
        for name in ("observations", "actions", "rewards", "states"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert got.terminated == want.terminated
    assert meta["actor"] == 0 and meta["env"].tolist() == [0, 1]
    assert os.listdir(tmp_path / "a") == ["actor-0.npz"]  # no temp file left


def test_a_file_without_episodes_reads_as_none(tmp_path):
    read, meta = read_episodes(write_episodes(tmp_path / "e.npz", []))
    assert read == [] and meta == {}


def test_a_file_not_written_by_write_episodes_is_rejected_naming_it(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(ValueError, match="other.npz"):
        read_episodes(path)


# ----------------------------------------------------------------- the callback ----
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"keep": 0}, "keep must be an int >= 1, got 0"),
        ({"every": 1.5}, "every must be an int >= 1, got 1.5"),
        ({"interval": 0}, "interval must be an int >= 1, got 0"),
        ({"burnin": -1}, "burnin must be an int >= 0, got -1"),
        ({"write_seconds": -1.0}, "write_seconds must be a number >= 0, got -1.0"),
        ({"statistic": "max"}, "statistic must be"),
    ],
)
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        StateDiscrepancyCallback(tmp_path, **kwargs)


def test_actors_record_each_env_and_write_their_kept_episodes(tmp_path, make_config):
    config = make_config(input_shape=(3,), envs_per_actor=2)
    adder = CountingVectorAdder(2)
    vector = R2D2VectorActor(config, numpy_network(config), adder, [0.5, 0.5], [0, 1])
    runner = SimpleNamespace(actor=vector, steps=0)
    callback = StateDiscrepancyCallback(tmp_path, keep=2, every=1, write_seconds=0)
    callback = pickle.loads(pickle.dumps(callback))  # as the manager ships it
    callback.on_r2d2_actor_begin(0, runner)
    play(vector, np.random.default_rng(0), [[4, 6, 3], [5]], callback, runner)
    callback.on_r2d2_actor_end(0, runner)
    episodes, meta = read_episodes(callback.episodes_file(0))
    # Env 0 keeps its last 2 episodes (6 and 3 steps), env 1 its only one (5 steps).
    assert [e.length for e in episodes] == [6, 3, 5]
    assert meta["env"].tolist() == [0, 0, 1] and meta["env_steps"] == runner.steps
    assert [e.length for e in callback.episodes()] == [6, 3, 5]
    # The shared adder got every call besides the recorders (each env starts one more
    # episode after its last: 3 + 1 and 1 + 1).
    assert adder.calls[0]["add"] == 13 and adder.calls[0]["add_first"] == 4
    assert adder.calls[1]["add"] == 13 and adder.calls[1]["add_first"] == 2
    # The stored states are the network's own: all finite, of the LSTM's size.
    assert all(e.states.shape[1:] == (2, config.state_size) for e in episodes)
    assert not pickle.loads(pickle.dumps(callback))._recorders  # recorders stay in the actor


def test_actors_rewrite_their_file_at_most_every_write_seconds(tmp_path, make_config):
    config = make_config(input_shape=(3,), envs_per_actor=1)
    vector = R2D2VectorActor(config, numpy_network(config), None, [0.5], [0])
    runner = SimpleNamespace(actor=vector, steps=0)
    callback = StateDiscrepancyCallback(tmp_path, keep=5, write_seconds=3600)
    callback.on_r2d2_actor_begin(0, runner)
    play(vector, np.random.default_rng(0), [[3, 4, 5]], callback, runner)
    assert len(callback.episodes()) == 1  # the first at once, then not within the hour
    callback.on_r2d2_actor_end(0, runner)
    assert len(callback.episodes()) == 3  # all at the end


class StubLearner:
    """The learner's face the callback uses; the measurement is the pure function on a
    numpy network."""

    def __init__(self, config, updates):
        self.config = config
        self.updates = updates
        self.network = numpy_network(config)

    def counters(self):
        return SimpleNamespace(env_steps=10 * self.updates)

    def state_discrepancy(self, episodes, burnin=None):
        return state_discrepancy(self.network, self.config, episodes, burnin)


def test_the_learner_measures_every_interval_and_writes_json_plot_and_metrics(
    tmp_path, make_config
):
    config = make_config(input_shape=(3,))
    rng = np.random.default_rng(2)
    episodes = [random_episode(config, rng, n) for n in (7, 12)]
    callback = StateDiscrepancyCallback(tmp_path, interval=5)
    learner = StubLearner(config, updates=0)
    write_episodes(callback.episodes_file(3), [random_episode(config, rng, 4)])  # a stale run's
    callback.on_r2d2_learner_begin(learner)
    assert callback.episodes() == []  # the earlier run's file is gone
    metrics = []
    callback.set_metric_logger(lambda name, value: metrics.append((name, value)))
    learner.updates = 5
    callback.on_r2d2_learner_train_end(learner)  # nothing recorded yet: nothing written
    assert not os.path.exists(tmp_path / RESULT_FILE)
    write_episodes(callback.episodes_file(0), episodes)
    learner.updates = 6
    callback.on_r2d2_learner_train_end(learner)  # not a multiple of the interval
    assert not os.path.exists(tmp_path / RESULT_FILE)
    learner.updates = 10
    callback.on_r2d2_learner_train_end(learner)
    data = json.loads((tmp_path / RESULT_FILE).read_text())
    expected = state_discrepancy(learner.network, config, episodes)
    assert data["updates"] == 10 and data["env_steps"] == 100
    assert data["nb_episodes"] == 2 and data["nb_sequences"] == expected.nb_sequences
    assert data["burnin"] == config.burnin and data["counts"] == expected.counts.tolist()
    for name in VARIANTS:
        np.testing.assert_allclose(data["by_step"][name], expected.by_step[name])
    assert data["summary"] == pytest.approx(expected.summary())
    assert (tmp_path / RESULT_PLOT).stat().st_size > 0
    summary = expected.summary()
    assert metrics == [
        ("diagnostics/state_discrepancy_first_step", summary["stored_burnin_first"]),
        ("diagnostics/state_discrepancy_mean", summary["stored_burnin_mean"]),
        ("diagnostics/state_discrepancy_zero_first_step", summary["zero_burnin_first"]),
    ]
    callback.on_r2d2_learner_end(learner)  # measured at 10 already: no second time
    assert len(metrics) == 3
    learner.updates = 12
    callback.on_r2d2_learner_end(learner)
    assert len(metrics) == 6 and json.loads((tmp_path / RESULT_FILE).read_text())["updates"] == 12


def test_a_measurement_that_fails_warns_and_the_run_goes_on(tmp_path, make_config, caplog):
    config = make_config(input_shape=(3,))
    callback = StateDiscrepancyCallback(tmp_path, interval=1, plot=False)
    other = make_config(input_shape=(5,))  # episodes of another config
    write_episodes(callback.episodes_file(0), [random_episode(other, np.random.default_rng(0), 4)])
    assert callback.measure(StubLearner(config, updates=1)) is None
    assert "state discrepancy failed" in caplog.text
    assert not os.path.exists(tmp_path / RESULT_FILE)


# ----------------------------------------------------------------- a manager run ---
@pytest.fixture(scope="module")
def manager_run(make_config, tmp_path_factory, assert_no_leftovers):
    """One actor process of two envs, 600 env steps, measured every 5 updates."""
    from r2d2_agent.distributed import R2D2Manager

    folder = tmp_path_factory.mktemp("sd_run")
    config = make_config(
        envs_per_actor=2, memory_capacity=200, memory_warmup=8, actor_sync_interval=50
    )
    callbacks = [
        RunLogCallback(folder, interval=50, tensorboard=False),
        StateDiscrepancyCallback(folder, keep=5, interval=5, write_seconds=0),
    ]
    with R2D2Manager(CARTPOLE, config, actor_num=1, callbacks=callbacks, progress=False) as m:
        result = m.train(nb_steps=600, max_seconds=150)
    assert_no_leftovers()
    return SimpleNamespace(folder=folder, result=result, callback=callbacks[1], config=config)


def test_a_manager_run_writes_the_diagnostic_with_sane_numbers(manager_run):
    assert manager_run.result.learner_updates >= 5
    data = json.loads((manager_run.folder / RESULT_FILE).read_text())
    assert data["updates"] == manager_run.result.learner_updates  # the final measurement
    assert 1 <= data["nb_episodes"] <= 2 * 5  # each env keeps 5
    assert data["nb_sequences"] >= data["nb_episodes"]
    assert data["counts"][0] == data["nb_sequences"]  # every window has a first step
    assert set(data["by_step"]) == set(VARIANTS)
    for name in VARIANTS:
        first = data["by_step"][name][0]
        assert first is not None and 0.0 <= first < 1e3, (name, first)
    assert data["summary"]["stored_burnin_first"] == data["by_step"]["stored_burnin"][0]
    # As in the paper: a zero state without burn-in is the furthest off at the first step
    # (about 27x the stored state with burn-in in this run).
    by_step = data["by_step"]
    assert by_step["zero"][0] > max(by_step["stored_burnin"][0], by_step["zero_burnin"][0])
    assert (manager_run.folder / RESULT_PLOT).stat().st_size > 0


def test_a_manager_run_records_both_envs_of_its_actor(manager_run):
    episodes, meta = read_episodes(manager_run.callback.episodes_file(0))
    assert set(meta["env"].tolist()) == {0, 1}
    assert all(e.states.shape[1:] == (2, manager_run.config.state_size) for e in episodes)


def test_a_manager_run_logs_the_diagnostic_as_learner_metrics(manager_run):
    lines = (manager_run.folder / "metrics-learner.jsonl").read_text().splitlines()
    names = {json.loads(line)["name"] for line in lines}
    assert "diagnostics/state_discrepancy_first_step" in names
