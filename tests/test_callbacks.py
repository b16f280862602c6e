"""Tests of `r2d2_agent.callbacks`: TensorBoard summaries and atomic checkpoints."""

import os
import pickle
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import (
    CheckpointCallback,
    R2D2Callback,
    RunLogCallback,
    TensorBoardCallback,
)
from r2d2_agent.compat import tf
from r2d2_agent.math import inverse_rescale
from r2d2_agent.roles.hooks import MetricLogger
from r2d2_agent.runlog import ScalarEventWriter, read_run

LEARNING = dict(memory_warmup=4, train_interval=2, actor_sync_interval=10, seed=3)
"""On top of `make_config`'s tiny CartPole: the learner updates every 2 env steps from the
4th stored sequence on, so short runs have losses to log."""


@pytest.fixture(scope="module")
def make_agent(make_config):
    """Factory: a compiled agent of the tiny CartPole config that learns (`LEARNING`)."""

    def factory(**overrides):
        agent = R2D2Agent(make_config(**{**LEARNING, **overrides}))
        agent.compile()
        return agent

    return factory


def _tags(logdir):
    tags = set()
    for root, _, files in os.walk(logdir):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                tags.update(value.tag for value in event.summary.value)
    return tags


def test_tensorboard_callback_writes_namespaced_metrics(make_agent, cartpole, tmp_path):
    agent = make_agent()
    agent.fit(
        cartpole,
        nb_steps=300,
        verbose=0,
        callbacks=[TensorBoardCallback(str(tmp_path), interval=20)],
    )
    tags = _tags(tmp_path / "agent")
    assert {
        "charts/episodic_return",
        "charts/episodic_length",
        "losses/td_loss",
        "losses/q_values_network",
        "losses/q_values_return",
        "charts/updates",
        "charts/SPS",
    } <= tags


def _scalars(folder):
    """{tag: [(step, value), ...]} of the event files in `folder`."""
    found = {}
    for name in sorted(os.listdir(folder)):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


def _fake_learner(make_config, updates, env_steps, mean_q):
    config = make_config()
    return SimpleNamespace(
        config=config,
        updates=updates,
        replay=[None] * 7,
        last_metrics={"loss": 0.5, "mean_q": mean_q, "mean_priority": 0.1},
        counters=lambda: SimpleNamespace(env_steps=env_steps),
    )


def _learner_scalars(make_config, folder, updates, env_steps, mean_q):
    """{tag: [(step, value)]} a TensorBoardCallback writes for one update of a learner
    at `updates` updates, `env_steps` env steps and a mean Q of `mean_q`."""
    callback = TensorBoardCallback(str(folder), interval=10)
    callback.on_r2d2_learner_train_end(_fake_learner(make_config, updates, env_steps, mean_q))
    callback.on_r2d2_learner_end(None)
    return _scalars(folder / "learner")


def test_tensorboard_learner_scalars_are_at_the_runs_env_steps(make_config, tmp_path):
    scalars = _learner_scalars(make_config, tmp_path, 30, 1234, 2.0)
    assert scalars["losses/td_loss"] == [(1234, 0.5)]
    assert scalars["charts/updates"] == [(1234, 30.0)]


def test_tensorboard_logs_mean_q_in_network_and_return_units(make_config, tmp_path):
    scalars = _learner_scalars(make_config, tmp_path, 10, 100, 5.0)
    assert scalars["losses/q_values_network"] == [(100, 5.0)]
    ((step, value),) = scalars["losses/q_values_return"]
    assert value == pytest.approx(float(inverse_rescale(5.0)), rel=1e-6) and value > 30


def test_tensorboard_actor_scalars_are_at_the_runs_env_steps(tmp_path):
    callback = TensorBoardCallback(str(tmp_path))
    runner = SimpleNamespace(steps=200, run_env_steps=500, epsilon=0.1)
    episode = SimpleNamespace(episode_return=12.0, episode_steps=12)
    callback.on_r2d2_actor_episode_end(1, runner, episode)
    callback.on_r2d2_actor_end(1, runner)
    assert _scalars(tmp_path / "actor_1")["charts/episodic_return"] == [(500, 12.0)]


def test_tensorboard_callback_pickles_without_its_writer(tmp_path):
    callback = TensorBoardCallback(str(tmp_path))
    callback._scalars("learner", 1, {"losses/td_loss": 1.0})
    clone = pickle.loads(pickle.dumps(callback))
    assert clone._writers == {} and clone.logdir == str(tmp_path)


def test_scalar_event_writer_files_read_back_with_tensorflow(tmp_path):
    writer = ScalarEventWriter(tmp_path)
    writer.scalars(7, {"losses/td_loss": 0.5, "skipped": None})
    writer.scalars(9, {"losses/td_loss": 0.25})
    writer.close()
    (name,) = os.listdir(tmp_path)
    events = list(tf.compat.v1.train.summary_iterator(str(tmp_path / name)))
    assert events[0].file_version == "brain.Event:2"
    read = [(e.step, v.tag, v.simple_value) for e in events[1:] for v in e.summary.value]
    assert read == [(7, "losses/td_loss", 0.5), (9, "losses/td_loss", 0.25)]


@pytest.fixture(scope="module")
def checkpointed_fit(make_agent, tmp_path_factory):
    """A fit of 250 steps that checkpoints every 100 steps and at the end."""
    directory = tmp_path_factory.mktemp("checkpoints")
    callback = CheckpointCallback(str(directory / "ckpt.h5"), interval=100)
    env = gym.make("CartPole-v1")
    make_agent().fit(env, nb_steps=250, verbose=0, callbacks=[callback])
    env.close()
    return SimpleNamespace(saves=callback.saves, files=[p.name for p in directory.iterdir()])


def test_checkpoint_callback_saves_every_interval_and_at_the_end(checkpointed_fit):
    assert checkpointed_fit.saves == 3  # steps 100, 200 and the end
    assert "ckpt.h5" in checkpointed_fit.files


def test_checkpoint_callback_leaves_no_temporary_file(checkpointed_fit):
    assert checkpointed_fit.files == ["ckpt.h5"]


def test_checkpoint_callback_loads_weights_before_training(make_agent, cartpole, tmp_path):
    source = make_agent(seed=11)
    source.save_weights(str(tmp_path / "w.h5"))
    obs = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
    expected = source.compute_q_values(obs)
    target = make_agent(seed=12, memory_warmup=64)  # no learning within 1 step
    assert not np.allclose(target.compute_q_values(obs), expected)
    target.fit(
        cartpole,
        nb_steps=1,
        verbose=0,
        callbacks=[
            CheckpointCallback(
                str(tmp_path / "c.h5"), load_path=str(tmp_path / "w.h5"), save_at_end=False
            )
        ],
    )
    target.reset_states()
    np.testing.assert_allclose(target.compute_q_values(obs), expected, rtol=1e-5)


def test_checkpoint_callback_saves_from_the_learner_hooks(make_agent, tmp_path):
    agent = make_agent()
    callback = CheckpointCallback(str(tmp_path / "l.h5"), interval=2, save_at_end=True)
    agent.learner.updates = 4
    callback.on_r2d2_learner_train_end(agent.learner)
    agent.learner.updates = 5
    callback.on_r2d2_learner_train_end(agent.learner)
    callback.on_r2d2_learner_end(agent.learner)
    assert callback.saves == 2


def test_checkpoint_callback_rejects_a_zero_interval():
    with pytest.raises(ValueError, match="interval"):
        CheckpointCallback("x.h5", interval=0)


class EpisodeReturns:
    """A duck-typed callback: only the one keras-rl hook it needs."""

    def __init__(self) -> None:
        self.returns = []

    def on_episode_end(self, episode, logs=None):
        self.returns.append(logs["episode_reward"])


def test_a_duck_typed_callback_runs_in_fit(make_agent, cartpole):
    callback = EpisodeReturns()
    history = make_agent().fit(cartpole, nb_steps=60, verbose=0, callbacks=[callback])
    assert callback.returns == history.history["episode_reward"] and callback.returns


class StepMetric(R2D2Callback):
    """Logs the agent's env steps and updates at every episode end as custom metrics."""

    def on_episode_end(self, episode, logs=None):
        self.log_metric("seen_steps", self.model.step)
        self.log_metric("seen_updates", self.model.learner.updates)


def test_a_custom_metric_from_fit_lands_in_the_run_directory(make_agent, cartpole, tmp_path):
    agent = make_agent()
    callbacks = [RunLogCallback(tmp_path, tensorboard=False), StepMetric()]
    agent.fit(cartpole, nb_steps=100, verbose=0, callbacks=callbacks)
    log = read_run(tmp_path)
    steps, updates = log.metric("seen_steps")["agent"], log.metric("seen_updates")["agent"]
    assert steps and all(r["value"] == r["env_steps"] for r in steps)
    assert updates[-1]["value"] > 0 and all(r["value"] == r["updates"] for r in updates)


def test_log_metric_outside_a_run_says_where_it_works():
    with pytest.raises(RuntimeError, match="log_metric"):
        StepMetric().log_metric("x", 1.0)


def test_a_metric_without_a_sink_warns_once(caplog):
    metrics = MetricLogger([StepMetric()], "learner", lambda: (0, 0))
    metrics("x", 1.0)
    metrics("x", 2.0)
    assert [r.message.count("goes nowhere") for r in caplog.records] == [1]


@pytest.mark.parametrize("value", ["1.0", None, True])
def test_a_metric_value_must_be_a_real_number(value):
    with pytest.raises(TypeError, match="'x' must be a real number"):
        MetricLogger([], "agent", lambda: (0, 0))("x", value)
