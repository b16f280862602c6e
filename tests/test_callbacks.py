"""The built-in callbacks: TensorBoard summaries and atomic checkpoints."""

import os

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import CheckpointCallback, TensorBoardCallback
from r2d2_agent.compat import tf
from r2d2_agent.presets import cartpole_config

TINY = dict(
    lstm_units=8,
    dense_units=8,
    burnin=2,
    input_length=4,
    multisteps=2,
    batch_size=4,
    memory_capacity=64,
    memory_warmup=4,
    train_interval=2,
    actor_sync_interval=10,
    seed=3,
)


def _agent(**overrides):
    agent = R2D2Agent(cartpole_config(**{**TINY, **overrides}))
    agent.compile()
    return agent


def _tags(logdir):
    tags = set()
    for root, _, files in os.walk(logdir):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                tags.update(value.tag for value in event.summary.value)
    return tags


def test_tensorboard_callback_writes_namespaced_metrics(tmp_path):
    agent = _agent()
    agent.fit(
        gym.make("CartPole-v1"),
        nb_steps=300,
        verbose=0,
        callbacks=[TensorBoardCallback(str(tmp_path), interval=20)],
    )
    tags = _tags(tmp_path / "agent")
    assert {
        "charts/episodic_return",
        "charts/episodic_length",
        "losses/td_loss",
        "losses/q_values",
        "charts/SPS",
    } <= tags


def test_tensorboard_callback_pickles_without_its_writer(tmp_path):
    import pickle

    callback = TensorBoardCallback(str(tmp_path))
    callback._scalars("learner", 1, {"losses/td_loss": 1.0})
    clone = pickle.loads(pickle.dumps(callback))
    assert clone._writer is None and clone.logdir == str(tmp_path)


def test_checkpoint_callback_saves_every_interval_and_at_the_end(tmp_path):
    path = tmp_path / "ckpt.h5"
    callback = CheckpointCallback(str(path), interval=100)
    agent = _agent()
    agent.fit(gym.make("CartPole-v1"), nb_steps=250, verbose=0, callbacks=[callback])
    assert callback.saves == 3  # steps 100, 200 and the end
    assert path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.h5"]  # no temporary left


def test_checkpoint_callback_loads_weights_before_training(tmp_path):
    source = _agent(seed=11)
    source.save_weights(str(tmp_path / "w.h5"))
    obs = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
    expected = source.compute_q_values(obs)
    target = _agent(seed=12, memory_warmup=64)  # no learning within 1 step
    assert not np.allclose(target.compute_q_values(obs), expected)
    target.fit(
        gym.make("CartPole-v1"),
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


def test_checkpoint_callback_saves_from_the_learner_hooks(tmp_path):
    agent = _agent()
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
