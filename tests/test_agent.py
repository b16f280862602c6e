"""Tests of `r2d2_agent.keras_rl.agent.R2D2Agent` and its episode loop
(`r2d2_agent.roles.episode_loop`).

Covers `fit`/`test` on gymnasium envs (raw or wrapped), step counting past keras-rl's
int16 limit, the keras-rl callback protocol and loggers, Q-values and recurrent state,
HDF5 weights round trips, and that truncated and terminated episodes reach the replay
differently. Learning is switched off (`train_interval` beyond the run) except where a test
is about it, so no update graph is traced and the tests stay fast. A run that several tests
check runs once, in a module-scoped fixture; the tests of Q-values and weights files share
one agent (`agent`), whose recurrent state is reset around each test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.compat import rl_callbacks
from r2d2_agent.envs import GymnasiumEnv
from r2d2_agent.math import inverse_rescale

NO_LEARNING = 10**6  # train_interval: no learner update within any test run


@pytest.fixture(scope="module")
def make_agent(make_config):
    """Factory: a compiled agent of the tiny CartPole config that never learns, unless
    `changes` (config fields) say otherwise."""

    def factory(**changes):
        agent = R2D2Agent(make_config(**{"train_interval": NO_LEARNING, **changes}))
        agent.compile()
        return agent

    return factory


@pytest.fixture(scope="module")
def shared_agent(make_agent):
    return make_agent()


@pytest.fixture
def agent(shared_agent):
    """The module's shared LSTM agent (it never learns), with a fresh recurrent state."""
    shared_agent.reset_states()
    yield shared_agent
    shared_agent.reset_states()


def _fit(agent, nb_steps, callbacks=None, **env_kwargs):
    """Fits `agent` on a new CartPole-v1 env, closed afterwards; returns the history logs."""
    env = gym.make("CartPole-v1", **env_kwargs)
    try:
        return agent.fit(env, nb_steps=nb_steps, verbose=0, callbacks=callbacks).history
    finally:
        env.close()


def network_q(agent, observations):
    """Q-values in return units of the last of `observations`, unrolled from a zero state."""
    obs = np.asarray(observations, np.float32)[None, :, None]  # (1, T, input_sequence, 4)
    zeros = np.zeros((1, agent.config.lstm_units), np.float32)
    q, _ = agent.learner.online.unroll(obs, (zeros, zeros))
    return inverse_rescale(q.numpy()[0, -1])


def two_observations():
    rng = np.random.default_rng(7)
    return rng.normal(size=(2, 4)).astype(np.float32)


# --------------------------------------------------------------------------- fit ----
@pytest.fixture(scope="module", params=[False, True], ids=["gymnasium_env", "GymnasiumEnv"])
def fit_60_steps(request, make_agent):
    """A fit of 60 steps on a raw gymnasium env or one wrapped in `GymnasiumEnv`."""
    agent = make_agent()
    env = gym.make("CartPole-v1")
    history = agent.fit(GymnasiumEnv(env) if request.param else env, nb_steps=60, verbose=0)
    env.close()
    return SimpleNamespace(agent=agent, logs=history.history)


def test_fit_history_has_one_entry_per_episode(fit_60_steps):
    logs = fit_60_steps.logs
    episodes = len(logs["episode_reward"])
    assert episodes >= 1
    assert len(logs["nb_episode_steps"]) == len(logs["nb_steps"]) == episodes


def test_fit_history_nb_steps_counts_the_steps_up_to_each_episode_end(fit_60_steps):
    logs = fit_60_steps.logs
    assert logs["nb_steps"] == list(np.cumsum(logs["nb_episode_steps"]))


def test_fit_history_episode_reward_is_the_sum_of_the_rewards(fit_60_steps):
    logs = fit_60_steps.logs
    assert logs["episode_reward"] == [float(n) for n in logs["nb_episode_steps"]]  # +1 a step


def test_fit_history_ends_within_nb_steps(fit_60_steps):
    assert fit_60_steps.logs["nb_steps"][-1] <= 60


def test_fit_counts_every_env_step(fit_60_steps):
    assert fit_60_steps.agent.step == 60


class ResetRecorder(gym.Wrapper):
    """Keeps the first observation of every reset (CartPole draws it from the env's RNG)."""

    def __init__(self, env):
        super().__init__(env)
        self.starts: list[np.ndarray] = []

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.starts.append(np.array(observation))
        return observation, info


def reset_observations(seed, count):
    """The first observations of `count` resets of a new CartPole-v1, the first seeded."""
    env = gym.make("CartPole-v1")
    starts = [env.reset(seed=seed)[0]] + [env.reset()[0] for _ in range(count - 1)]
    env.close()
    return np.array(starts)


def test_fit_in_chunks_continues_the_envs_randomness(shared_agent):
    env = ResetRecorder(gym.make("CartPole-v1"))
    for _ in range(3):
        shared_agent.fit(env, nb_steps=40, verbose=0)
    expected = reset_observations(shared_agent.config.seed, len(env.starts))
    np.testing.assert_array_equal(np.array(env.starts), expected)


def test_fit_seeds_each_new_env_with_the_config_seed(shared_agent):
    firsts = []
    for _ in range(2):
        env = ResetRecorder(gym.make("CartPole-v1"))
        shared_agent.fit(env, nb_steps=5, verbose=0)
        firsts.append(env.starts[0])
    np.testing.assert_array_equal(firsts, reset_observations(shared_agent.config.seed, 1)[[0, 0]])


def test_a_seed_set_on_the_env_is_used_by_the_next_fit(shared_agent):
    env = GymnasiumEnv(ResetRecorder(gym.make("CartPole-v1")))
    shared_agent.fit(env, nb_steps=5, verbose=0)
    env.seed(123)
    shared_agent.fit(env, nb_steps=5, verbose=0)
    np.testing.assert_array_equal(env.env.starts[-1], reset_observations(123, 1)[0])


def test_fit_past_int16_range_terminates_and_counts_exactly(make_agent):
    agent = make_agent()
    logs = _fit(agent, nb_steps=33_000)
    assert agent.step == 33_000
    assert sum(logs["nb_episode_steps"]) <= 33_000
    # CartPole-v1 episodes last at most 500 steps, so the last one ended after step 32,500.
    assert logs["nb_steps"][-1] > 33_000 - 500


def test_fit_before_compile_raises(make_config, cartpole):
    agent = R2D2Agent(make_config(lstm_units=0))
    with pytest.raises(RuntimeError, match="compile"):
        agent.fit(cartpole, nb_steps=10, verbose=0)


def test_fit_rejects_an_env_whose_observation_shape_differs_from_the_config(make_agent, cartpole):
    """A clear ValueError naming both shapes, before any step is taken."""
    agent = make_agent(input_shape=(3,))
    with pytest.raises(ValueError, match=r"\(4,\).*\(3,\)"):
        agent.fit(cartpole, nb_steps=10, verbose=0)
    assert agent.step == 0


def test_fit_updates_the_learner_once_replay_is_warm(make_agent):
    agent = make_agent(lstm_units=0, train_interval=4, memory_warmup=4)
    before = agent.learner.get_weights()
    _fit(agent, nb_steps=40)
    assert agent.learner.updates > 0
    after = agent.learner.get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_compile_after_fit_trains_with_the_new_optimizer(make_agent):
    # A second compile (e.g. a lower learning rate for a second phase) must take effect:
    # the update traced with the first optimizer is traced again with the new one.
    from r2d2_agent.compat import keras

    agent = make_agent(lstm_units=0, train_interval=4, memory_warmup=4)
    _fit(agent, nb_steps=40)
    agent.compile(keras.optimizers.SGD(0.0))
    before, updates = agent.learner.get_weights(), agent.learner.updates
    _fit(agent, nb_steps=40)
    assert agent.learner.updates > updates
    after = agent.learner.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def _actor_weights(agent):
    policy = agent.actor.policy  # the numpy policy: weights by layout name
    return [policy.w[name] for name, _ in policy.layout]


@pytest.mark.parametrize(("steps", "synced"), [(9, False), (10, True)])
def test_actor_takes_the_learner_weights_every_sync_interval(make_agent, steps, synced):
    agent = make_agent(lstm_units=0, actor_sync_interval=10)
    rng = np.random.default_rng(0)
    new = [rng.normal(size=w.shape).astype(np.float32) for w in agent.learner.get_weights()]
    agent.learner.set_weights(new)
    _fit(agent, nb_steps=steps)
    same = all(np.array_equal(a, b) for a, b in zip(_actor_weights(agent), new, strict=True))
    assert same is synced


def test_manual_forward_backward_trains_every_train_interval_steps(make_config, cartpole):
    """A user's own loop gets the same schedule as fit(): one update per train_interval."""
    agent = R2D2Agent(
        make_config(
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
    observation, _ = cartpole.reset(seed=0)
    for _ in range(200):
        action = agent.forward(observation)
        observation, reward, terminated, truncated, _ = cartpole.step(action)
        agent.backward(reward, terminated, truncated=truncated, next_observation=observation)
        if terminated or truncated:
            observation, _ = cartpole.reset()
    assert agent.step == 200
    assert 40 <= agent.learner.updates <= 50


# ------------------------------------------------------------- keras-rl callbacks ----
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


@pytest.fixture(scope="module")
def recorded_fit(make_agent):
    """A fit of 40 steps with a `Recorder` callback."""
    agent, recorder = make_agent(lstm_units=0), Recorder()
    _fit(agent, nb_steps=40, callbacks=[recorder])
    return SimpleNamespace(
        agent=agent, recorder=recorder, names=[name for name, _ in recorder.events]
    )


def test_callbacks_see_train_begin_then_an_episode_begin_first_and_train_end_last(
    recorded_fit,
):
    names = recorded_fit.names
    assert names[0] == "train_begin" and names[-1] == "train_end"
    assert names[1] == "episode_begin"


def test_callbacks_see_step_begin_action_begin_action_end_step_end_each_step(recorded_fit):
    names = recorded_fit.names
    assert names.count("step_end") == 40 and names.count("action_begin") == 40
    steps = [n for n in names if n in ("step_begin", "action_begin", "action_end", "step_end")]
    assert steps == ["step_begin", "action_begin", "action_end", "step_end"] * 40


def test_step_end_logs_have_keras_rl_keys(recorded_fit):
    step_keys = {keys for name, keys in recorded_fit.recorder.events if name == "step_end"}
    assert step_keys == {
        frozenset({"action", "observation", "reward", "metrics", "episode", "info"})
    }


def test_episode_end_logs_have_keras_rl_keys(recorded_fit):
    episode_keys = {keys for name, keys in recorded_fit.recorder.events if name == "episode_end"}
    assert episode_keys == {frozenset({"episode_reward", "nb_episode_steps", "nb_steps"})}


def test_callbacks_get_the_agent_as_model_and_the_fit_params(recorded_fit):
    recorder = recorded_fit.recorder
    assert recorder.model is recorded_fit.agent and recorder.params["nb_steps"] == 40


@pytest.fixture(scope="module")
def logged_fit(make_agent, tmp_path_factory):
    """A fit of 60 steps with keras-rl's `FileLogger` and `TrainEpisodeLogger`."""
    agent = make_agent(lstm_units=0)
    path = tmp_path_factory.mktemp("logs") / "log.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        logs = _fit(
            agent,
            nb_steps=60,
            callbacks=[
                rl_callbacks.FileLogger(str(path), interval=1),
                rl_callbacks.TrainEpisodeLogger(),
            ],
        )
    return SimpleNamespace(
        agent=agent, logs=logs, logged=json.loads(path.read_text()), out=out.getvalue()
    )


def test_keras_rl_file_logger_logs_the_episode_rewards(logged_fit):
    assert logged_fit.logged["episode_reward"] == logged_fit.logs["episode_reward"]


def test_keras_rl_file_logger_logs_the_agent_metrics(logged_fit):
    assert set(logged_fit.agent.metrics_names) <= set(logged_fit.logged)


def test_keras_rl_train_episode_logger_prints_the_run_and_its_episodes(logged_fit):
    assert "Training for 60 steps" in logged_fit.out and "episode: 1," in logged_fit.out


# -------------------------------------------------------------------------- test ----
@pytest.fixture(scope="module")
def tested_agent(make_agent):
    """An agent fitted for 30 steps, then tested for 2 episodes."""
    agent = make_agent()
    _fit(agent, nb_steps=30)
    stored_before = len(agent.learner.replay)
    env = gym.make("CartPole-v1")
    logs = agent.test(env, nb_episodes=2, visualize=False, verbose=0).history
    env.close()
    return SimpleNamespace(
        agent=agent,
        logs=logs,
        stored_before=stored_before,
        stored_after=len(agent.learner.replay),
    )


def test_test_plays_nb_episodes(tested_agent):
    assert len(tested_agent.logs["episode_reward"]) == 2


def test_test_logs_each_episodes_own_length_as_nb_steps(tested_agent):
    """keras-rl's convention: in test() `nb_steps` is the episode's length."""
    logs = tested_agent.logs
    assert logs["nb_steps"] == logs["nb_episode_steps"]
    assert len(logs["nb_steps"]) == 2


def test_test_records_nothing(tested_agent):
    assert tested_agent.stored_before > 0
    assert tested_agent.stored_after == tested_agent.stored_before


def test_test_leaves_a_reset_recurrent_state(tested_agent):
    agent, obs = tested_agent.agent, two_observations()[1]
    np.testing.assert_allclose(agent.compute_q_values(obs), network_q(agent, [obs]), atol=1e-5)


# --------------------------------------------------------- Q-values and state ----
def test_compute_q_values_gives_one_value_per_action(agent):
    assert agent.compute_q_values(two_observations()[0]).shape == (2,)


def test_compute_q_values_uses_the_current_recurrent_state(agent):
    obs0, obs1 = two_observations()
    agent.forward(obs0)  # starts an episode and advances the recurrent state past obs0
    q = agent.compute_q_values(obs1)
    np.testing.assert_allclose(q, network_q(agent, [obs0, obs1]), atol=1e-5)
    assert not np.allclose(q, network_q(agent, [obs1]), atol=1e-5)  # state mattered


def test_compute_q_values_does_not_advance_the_recurrent_state(agent):
    obs0, obs1 = two_observations()
    agent.forward(obs0)
    np.testing.assert_array_equal(agent.compute_q_values(obs1), agent.compute_q_values(obs1))


def test_compute_q_values_are_in_return_units(agent):
    obs = two_observations()[0] * 50.0
    q_network = agent.learner.online.unroll(
        obs[None, None, None], (np.zeros((1, agent.config.lstm_units), np.float32),) * 2
    )[0].numpy()[0, 0]
    q = agent.compute_q_values(obs)
    np.testing.assert_allclose(q, inverse_rescale(q_network), atol=1e-5)
    assert not np.allclose(q, q_network, atol=1e-5)


# ------------------------------------------------------------ predict with a state ----
def episode_observations(steps=6):
    rng = np.random.default_rng(11)
    return rng.normal(size=(steps, 4)).astype(np.float32)


def test_predict_from_a_new_episode_gives_the_fresh_networks_q_values(agent):
    obs = two_observations()[0]
    _, q, _ = agent.predict(obs)
    np.testing.assert_allclose(q, network_q(agent, [obs]), atol=1e-5)


def test_predict_carries_the_state_it_returns_through_an_episode(agent):
    observations, state = episode_observations(), None
    for t, obs in enumerate(observations):
        action, q, state = agent.predict(obs, state, episode_start=(t == 0))
        np.testing.assert_allclose(q, network_q(agent, observations[: t + 1]), atol=1e-5)
        assert action == int(np.argmax(q))


def test_predict_ignores_what_the_agents_own_episode_left(agent):
    observations = episode_observations()
    for obs in observations[:3]:
        agent.forward(obs)  # the agent's own state moves on
    _, q, _ = agent.predict(observations[3])
    np.testing.assert_allclose(q, network_q(agent, [observations[3]]), atol=1e-5)


def test_predict_leaves_the_agents_own_state_as_it_was(agent):
    obs0, obs1 = two_observations()
    agent.forward(obs0)
    before = agent.compute_q_values(obs1)
    agent.predict(obs1, agent.predict(obs0).state)
    np.testing.assert_array_equal(agent.compute_q_values(obs1), before)


def test_predict_with_episode_start_forgets_the_state_passed(agent):
    obs0, obs1 = two_observations()
    state = agent.predict(obs0).state
    np.testing.assert_array_equal(
        agent.predict(obs1, state, episode_start=True).q_values, agent.predict(obs1).q_values
    )


def test_predict_stacks_frames_and_feeds_the_previous_action_and_reward(make_agent):
    """Against the network unrolled over the whole episode at once: frames stacked in
    pairs (a zero frame before the start), the previous action and reward at each step."""
    agent = make_agent(input_sequence=2, enable_prev_action_reward=True)
    observations, rewards = episode_observations(), [0.5, -1.0, 2.0, 0.0, 1.5]
    predictions, state = [], None
    for t, obs in enumerate(observations):
        predictions.append(agent.predict(obs, state, reward=rewards[t - 1] if t else None))
        state = predictions[-1].state
    frames = np.concatenate([np.zeros((1, 4), np.float32), observations])
    stacked = np.stack([frames[:-1], frames[1:]], axis=1)[None]  # (1, T, 2, 4)
    prev_action = np.array([[-1] + [p.action for p in predictions[:-1]]], np.int32)
    prev_reward = np.array([[0.0, *rewards]], np.float32)
    zeros = np.zeros((1, agent.config.lstm_units), np.float32)
    q, _ = agent.learner.online.unroll(
        stacked, (zeros, zeros), prev_action=prev_action, prev_reward=prev_reward
    )
    expected = inverse_rescale(q.numpy()[0])
    np.testing.assert_allclose([p.q_values for p in predictions], expected, atol=1e-5)


def test_predict_uses_the_learners_latest_weights(make_agent):
    agent = make_agent(train_interval=1, memory_warmup=4, actor_sync_interval=10**6)
    _fit(agent, 60)  # updates, but the acting copy is never synced during the fit
    assert agent.learner.updates > 0
    obs = two_observations()[0]
    np.testing.assert_allclose(agent.predict(obs).q_values, network_q(agent, [obs]), atol=1e-5)


def test_predict_asks_for_the_reward_when_the_network_takes_it(make_agent):
    agent = make_agent(enable_prev_action_reward=True)
    state = agent.predict(two_observations()[0]).state
    with pytest.raises(ValueError, match="pass reward="):
        agent.predict(two_observations()[1], state)


def test_predict_names_a_state_of_the_wrong_kind(agent):
    with pytest.raises(TypeError, match="RecurrentState"):
        agent.predict(two_observations()[0], (np.zeros(8), np.zeros(8)))


def test_reset_states_zeros_the_recurrent_state(agent):
    obs0, obs1 = two_observations()
    agent.forward(obs0)
    agent.reset_states()
    np.testing.assert_allclose(agent.compute_q_values(obs1), network_q(agent, [obs1]), atol=1e-5)


# ---------------------------------------------------------------- weights files ----
@pytest.fixture(scope="module")
def loaded_agent(make_agent, tmp_path_factory):
    """A fresh agent that loaded the weights saved by another, differently seeded one."""
    path = str(tmp_path_factory.mktemp("weights") / "w.h5")
    source, fresh = make_agent(seed=1), make_agent(seed=2)  # different inits
    obs = two_observations()[0]
    source.save_weights(path)
    q_before_load = fresh.compute_q_values(obs)
    fresh.load_weights(path)
    return SimpleNamespace(source=source, fresh=fresh, obs=obs, q_before_load=q_before_load)


def test_load_weights_restores_the_saved_q_values(loaded_agent):
    source, fresh, obs = loaded_agent.source, loaded_agent.fresh, loaded_agent.obs
    assert not np.allclose(loaded_agent.q_before_load, source.compute_q_values(obs))
    np.testing.assert_allclose(fresh.compute_q_values(obs), source.compute_q_values(obs), atol=1e-6)


def test_load_weights_sets_the_target_network_too(loaded_agent):
    target = loaded_agent.fresh.learner.target.get_weights()
    online = loaded_agent.source.learner.get_weights()
    for target_array, online_array in zip(target, online, strict=True):
        np.testing.assert_array_equal(target_array, online_array)


def test_save_weights_refuses_to_overwrite(agent, tmp_path):
    path = str(tmp_path / "w.h5")
    agent.save_weights(path)
    with pytest.raises(FileExistsError):
        agent.save_weights(path)


def test_save_weights_leaves_no_temporary_file(agent, tmp_path):
    path = str(tmp_path / "w.h5")
    agent.save_weights(path)
    with pytest.raises(FileExistsError):
        agent.save_weights(path)
    agent.save_weights(path, overwrite=True)
    assert os.listdir(tmp_path) == ["w.h5"]


# ------------------------------------------------------- truncated vs terminated ----
@pytest.fixture(scope="module")
def episode_ends(make_config):
    """(terminated, truncated, bootstrap discount of the last step) of each episode of a
    random agent (gamma 0.9): 40 steps truncated at 10 steps, then 150 plain steps."""
    agent = R2D2Agent(make_config(gamma=0.9, train_interval=NO_LEARNING), epsilon=1.0)
    agent.compile()
    stored = []
    replay_add = agent.learner.replay.add

    def record(sequence_record, stream=0):
        stored.append({k: np.array(v) for k, v in sequence_record.fields.items()})
        return replay_add(sequence_record, stream)

    agent.learner.replay.add = record  # this agent's replay only

    class EpisodeEnds(rl_callbacks.Callback):
        """Per finished episode: (terminated, truncated, sequences stored so far)."""

        def __init__(self):
            super().__init__()
            self.ends: list[tuple[bool, bool, int]] = []
            self._info = {}

        def on_step_end(self, step, logs={}):  # noqa: B006
            self._info = logs["info"]

        def on_episode_end(self, episode, logs={}):  # noqa: B006
            self.ends.append((self._info["terminated"], self._info["truncated"], len(stored)))

    ends = EpisodeEnds()
    _fit(agent, nb_steps=40, callbacks=[ends], max_episode_steps=10)
    _fit(agent, nb_steps=150, callbacks=[ends])
    result = []
    for terminated, truncated, count in ends.ends:
        last = stored[count - 1]  # the episode's last sequence
        step = np.flatnonzero(last["mask"])[-1]
        result.append((terminated, truncated, last["bootstrap_discount"][step]))
    return result


def test_truncated_episode_bootstraps(episode_ends):
    discounts = [discount for _, truncated, discount in episode_ends if truncated]
    assert discounts, "no truncated episode"
    for discount in discounts:
        assert discount == pytest.approx(0.9), "a truncated episode must bootstrap"


def test_terminated_episode_does_not_bootstrap(episode_ends):
    discounts = [d for terminated, truncated, d in episode_ends if terminated and not truncated]
    assert discounts, "no terminated episode"
    for discount in discounts:
        assert discount == 0.0, "a terminated episode must not bootstrap"
