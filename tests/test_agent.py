"""Tests of `r2d2_agent.agent.R2D2Agent` and its episode loop (`r2d2_agent.loops`).

Covers `fit`/`test` on gymnasium envs (raw or wrapped), step counting past keras-rl's
int16 limit, the keras-rl callback protocol and loggers, Q-values and recurrent state,
HDF5 weights round trips, and that truncated and terminated episodes reach the replay
differently. Learning is switched off (`train_interval` beyond the run) except where a test
is about it, so no update graph is traced and the tests stay fast.
"""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.compat import rl_callbacks
from r2d2_agent.config import R2D2Config
from r2d2_agent.envs import GymnasiumEnv
from r2d2_agent.math import inverse_rescale

NO_LEARNING = 10**6  # train_interval: no learner update within any test run


def cartpole_config(**changes):
    kwargs = {
        "input_shape": (4,),
        "nb_actions": 2,
        "lstm_units": 8,
        "dense_units": 8,
        "burnin": 2,
        "input_length": 4,
        "multisteps": 2,
        "batch_size": 4,
        "memory_capacity": 64,
        "train_interval": NO_LEARNING,
        "seed": 0,
    }
    return R2D2Config(**(kwargs | changes))


def compiled_agent(**changes):
    agent = R2D2Agent(cartpole_config(**changes))
    agent.compile()
    return agent


def cartpole(**kwargs):
    return gym.make("CartPole-v1", **kwargs)


def network_q(agent, observations):
    """Q-values in return units of the last of `observations`, unrolled from a zero state."""
    obs = np.asarray(observations, np.float32)[None, :, None]  # (1, T, input_sequence, 4)
    zeros = np.zeros((1, agent.config.lstm_units), np.float32)
    q, _ = agent.learner.online.unroll(obs, (zeros, zeros))
    return inverse_rescale(q.numpy()[0, -1])


def two_observations():
    rng = np.random.default_rng(7)
    return rng.normal(size=(2, 4)).astype(np.float32)


@pytest.mark.parametrize("wrap", [False, True], ids=["gymnasium_env", "GymnasiumEnv"])
def test_fit_returns_history_per_episode(wrap):
    agent = compiled_agent()
    env = GymnasiumEnv(cartpole()) if wrap else cartpole()
    history = agent.fit(env, nb_steps=60, verbose=0)
    logs = history.history
    episodes = len(logs["episode_reward"])
    assert episodes >= 1
    assert len(logs["nb_episode_steps"]) == len(logs["nb_steps"]) == episodes
    assert logs["nb_steps"] == list(np.cumsum(logs["nb_episode_steps"]))
    assert logs["episode_reward"] == [float(n) for n in logs["nb_episode_steps"]]  # +1 a step
    assert logs["nb_steps"][-1] <= 60 and agent.step == 60


def test_fit_past_int16_range_terminates_and_counts_exactly():
    agent = compiled_agent()
    history = agent.fit(cartpole(), nb_steps=33_000, verbose=0)
    assert agent.step == 33_000
    assert sum(history.history["nb_episode_steps"]) <= 33_000
    # CartPole-v1 episodes last at most 500 steps, so the last one ended after step 32,500.
    assert history.history["nb_steps"][-1] > 33_000 - 500


def test_fit_before_compile_raises():
    agent = R2D2Agent(cartpole_config(lstm_units=0))
    with pytest.raises(RuntimeError, match="compile"):
        agent.fit(cartpole(), nb_steps=10, verbose=0)


class Recorder(rl_callbacks.Callback):
    """Records every callback with the keys of its logs."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, frozenset]] = []

    def _record(self, name, logs):
        self.events.append((name, frozenset(logs or {})))

    def on_train_begin(self, logs=None):
        self._record("train_begin", logs)

    def on_train_end(self, logs=None):
        self._record("train_end", logs)

    def on_episode_begin(self, episode, logs={}):  # noqa: B006 (keras-rl's signature)
        self._record("episode_begin", logs)

    def on_episode_end(self, episode, logs={}):  # noqa: B006
        self._record("episode_end", logs)

    def on_step_begin(self, step, logs={}):  # noqa: B006
        self._record("step_begin", logs)

    def on_step_end(self, step, logs={}):  # noqa: B006
        self._record("step_end", logs)

    def on_action_begin(self, action, logs={}):  # noqa: B006
        self._record("action_begin", logs)

    def on_action_end(self, action, logs={}):  # noqa: B006
        self._record("action_end", logs)


def test_callbacks_see_keras_rl_protocol_and_log_keys():
    agent = compiled_agent(lstm_units=0)
    recorder = Recorder()
    agent.fit(cartpole(), nb_steps=40, verbose=0, callbacks=[recorder])
    names = [name for name, _ in recorder.events]
    assert names[0] == "train_begin" and names[-1] == "train_end"
    assert names[1] == "episode_begin"
    assert names.count("step_end") == 40 and names.count("action_begin") == 40
    # Each step: step_begin, action_begin, action_end, step_end.
    steps = [n for n in names if n in ("step_begin", "action_begin", "action_end", "step_end")]
    assert steps == ["step_begin", "action_begin", "action_end", "step_end"] * 40
    step_keys = {keys for name, keys in recorder.events if name == "step_end"}
    assert step_keys == {
        frozenset({"action", "observation", "reward", "metrics", "episode", "info"})
    }
    episode_keys = {keys for name, keys in recorder.events if name == "episode_end"}
    assert episode_keys == {frozenset({"episode_reward", "nb_episode_steps", "nb_steps"})}
    assert recorder.model is agent and recorder.params["nb_steps"] == 40


def test_keras_rl_file_logger_and_train_episode_logger_work(tmp_path, capsys):
    agent = compiled_agent(lstm_units=0)
    path = tmp_path / "log.json"
    history = agent.fit(
        cartpole(),
        nb_steps=60,
        verbose=0,
        callbacks=[
            rl_callbacks.FileLogger(str(path), interval=1),
            rl_callbacks.TrainEpisodeLogger(),
        ],
    )
    data = json.loads(path.read_text())
    assert data["episode_reward"] == history.history["episode_reward"]
    assert set(agent.metrics_names) <= set(data)
    out = capsys.readouterr().out
    assert "Training for 60 steps" in out and "episode: 1," in out


def test_test_records_nothing_and_resets_the_state():
    agent = compiled_agent()
    agent.fit(cartpole(), nb_steps=30, verbose=0)
    stored = len(agent.learner.replay)
    assert stored > 0
    history = agent.test(cartpole(), nb_episodes=2, visualize=False, verbose=0)
    assert len(history.history["episode_reward"]) == 2
    assert len(agent.learner.replay) == stored
    obs = two_observations()[1]
    np.testing.assert_allclose(agent.compute_q_values(obs), network_q(agent, [obs]), atol=1e-5)


def test_compute_q_values_uses_the_current_state_without_advancing_it():
    agent = compiled_agent()
    obs0, obs1 = two_observations()
    agent.forward(obs0)  # starts an episode and advances the recurrent state past obs0
    first = agent.compute_q_values(obs1)
    second = agent.compute_q_values(obs1)
    assert first.shape == (2,)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, network_q(agent, [obs0, obs1]), atol=1e-5)
    assert not np.allclose(first, network_q(agent, [obs1]), atol=1e-5)  # state mattered


def test_compute_q_values_are_in_return_units():
    agent = compiled_agent()
    obs = two_observations()[0] * 50.0
    q_network = agent.learner.online.unroll(
        obs[None, None, None], (np.zeros((1, 8), np.float32),) * 2
    )[0].numpy()[0, 0]
    q = agent.compute_q_values(obs)
    np.testing.assert_allclose(q, inverse_rescale(q_network), atol=1e-5)
    assert not np.allclose(q, q_network, atol=1e-5)


def test_reset_states_zeros_the_recurrent_state():
    agent = compiled_agent()
    obs0, obs1 = two_observations()
    agent.forward(obs0)
    agent.reset_states()
    np.testing.assert_allclose(agent.compute_q_values(obs1), network_q(agent, [obs1]), atol=1e-5)


def test_save_and_load_weights_round_trip_into_a_fresh_agent(tmp_path):
    path = str(tmp_path / "w.h5")
    source, fresh = compiled_agent(seed=1), compiled_agent(seed=2)  # different inits
    obs = two_observations()[0]
    source.save_weights(path)
    assert not np.allclose(fresh.compute_q_values(obs), source.compute_q_values(obs))
    fresh.load_weights(path)
    np.testing.assert_allclose(fresh.compute_q_values(obs), source.compute_q_values(obs), atol=1e-6)
    pairs = zip(fresh.learner.target.get_weights(), source.learner.get_weights(), strict=True)
    for target, online in pairs:
        np.testing.assert_array_equal(target, online)


def test_save_weights_refuses_to_overwrite_and_leaves_no_temporary_file(tmp_path):
    agent = compiled_agent(lstm_units=0)
    path = tmp_path / "w.h5"
    agent.save_weights(str(path))
    with pytest.raises(FileExistsError):
        agent.save_weights(str(path))
    agent.save_weights(str(path), overwrite=True)
    assert os.listdir(tmp_path) == ["w.h5"]


class EpisodeEnds(rl_callbacks.Callback):
    """Per finished episode: (terminated, truncated, sequences stored so far)."""

    def __init__(self, stored):
        super().__init__()
        self.stored = stored
        self.ends: list[tuple[bool, bool, int]] = []
        self._info = {}

    def on_step_end(self, step, logs={}):  # noqa: B006
        self._info = logs["info"]

    def on_episode_end(self, episode, logs={}):  # noqa: B006
        self.ends.append((self._info["terminated"], self._info["truncated"], len(self.stored)))


def test_truncated_episode_bootstraps_and_terminated_does_not(monkeypatch):
    config = cartpole_config(gamma=0.9)
    agent = R2D2Agent(config, epsilon=1.0)
    agent.compile()
    stored = []
    replay_add = agent.learner.replay.add

    def record(sequence, priority):
        stored.append({k: np.array(v) for k, v in sequence.items()})
        return replay_add(sequence, priority)

    monkeypatch.setattr(agent.learner.replay, "add", record)
    ends = EpisodeEnds(stored)
    agent.fit(cartpole(max_episode_steps=10), nb_steps=40, verbose=0, callbacks=[ends])
    agent.fit(cartpole(), nb_steps=150, verbose=0, callbacks=[ends])
    seen = set()
    for terminated, truncated, count in ends.ends:
        last = stored[count - 1]  # the episode's last sequence
        step = np.flatnonzero(last["mask"])[-1]
        discount = last["bootstrap_discount"][step]
        if truncated:
            assert discount == pytest.approx(0.9), "a truncated episode must bootstrap"
            seen.add("truncated")
        elif terminated:
            assert discount == 0.0, "a terminated episode must not bootstrap"
            seen.add("terminated")
    assert seen == {"truncated", "terminated"}


def test_fit_updates_the_learner_once_replay_is_warm():
    agent = compiled_agent(lstm_units=0, train_interval=4, memory_warmup=4)
    before = agent.learner.get_weights()
    agent.fit(cartpole(), nb_steps=40, verbose=0)
    assert agent.learner.updates > 0
    after = agent.learner.get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def _actor_weights(agent):
    policy = agent.actor.policy  # the numpy policy: weights by layout name
    return [policy.w[name] for name, _ in policy.layout]


@pytest.mark.parametrize(("steps", "synced"), [(9, False), (10, True)])
def test_actor_takes_the_learner_weights_every_sync_interval(steps, synced):
    agent = compiled_agent(lstm_units=0, actor_sync_interval=10)
    rng = np.random.default_rng(0)
    new = [rng.normal(size=w.shape).astype(np.float32) for w in agent.learner.get_weights()]
    agent.learner.set_weights(new)
    agent.fit(cartpole(), nb_steps=steps, verbose=0)
    same = all(np.array_equal(a, b) for a, b in zip(_actor_weights(agent), new, strict=True))
    assert same is synced


def test_fit_rejects_an_env_whose_observation_shape_differs_from_the_config():
    """A clear ValueError naming both shapes, before any step is taken."""
    import gymnasium

    from r2d2_agent import R2D2Agent, R2D2Config

    agent = R2D2Agent(
        R2D2Config(
            input_shape=(3,),
            nb_actions=2,
            lstm_units=4,
            dense_units=4,
            burnin=1,
            input_length=2,
            multisteps=1,
            batch_size=2,
            memory_capacity=8,
        )
    )
    agent.compile()
    with pytest.raises(ValueError, match=r"\(4,\).*\(3,\)"):
        agent.fit(gymnasium.make("CartPole-v1"), nb_steps=10, verbose=0)
    assert agent.step == 0


def test_test_logs_each_episodes_own_length_as_nb_steps():
    """keras-rl's convention: in test() `nb_steps` is the episode's length."""
    import gymnasium

    from r2d2_agent import R2D2Agent
    from r2d2_agent.presets import cartpole_config

    agent = R2D2Agent(cartpole_config(lstm_units=4, dense_units=4, seed=5))
    agent.compile()
    logs = agent.test(
        gymnasium.make("CartPole-v1"), nb_episodes=3, visualize=False, verbose=0
    ).history
    assert logs["nb_steps"] == logs["nb_episode_steps"]
    assert len(logs["nb_steps"]) == 3


def test_manual_forward_backward_trains_every_train_interval_steps():
    """A user's own loop gets the same schedule as fit(): one update per train_interval."""
    import gymnasium

    from r2d2_agent import R2D2Agent
    from r2d2_agent.presets import cartpole_config

    agent = R2D2Agent(
        cartpole_config(
            lstm_units=4,
            dense_units=4,
            burnin=1,
            input_length=2,
            multisteps=1,
            batch_size=2,
            memory_warmup=2,
            train_interval=4,
            seed=6,
        )
    )
    agent.compile()
    agent.training = True
    env = gymnasium.make("CartPole-v1")
    observation, _ = env.reset(seed=0)
    for _ in range(200):
        action = agent.forward(observation)
        observation, reward, terminated, truncated, _ = env.step(action)
        agent.backward(reward, terminated, truncated=truncated, next_observation=observation)
        if terminated or truncated:
            observation, _ = env.reset()
    assert agent.step == 200
    assert 40 <= agent.learner.updates <= 50
