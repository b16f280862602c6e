"""Tests of `EvaluationCallback`: greedy evaluations that keep (and restore) the best weights.

The env pays the action: one-step episodes, reward 1 for action 1 and 0 for action 0. The
network's choice is set through the advantage head's bias (its kernels zeroed), so that
"weights A" score exactly 1.0 and "weights B" exactly 0.0, whatever the observations.
"""

import functools
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import EvaluationCallback, R2D2Callback, RunLogCallback
from r2d2_agent.checkpoints import read_checkpoint
from r2d2_agent.distributed import R2D2Manager
from r2d2_agent.networks.numpy_net import weight_layout
from r2d2_agent.runlog import read_run


class PaysTheAction(gym.Env):
    """One-step episodes; the reward is the action (0 or 1)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return obs, float(action), True, False, {}


def make_env():
    return PaysTheAction()


class PaysTheStart(PaysTheAction):
    """One-step episodes whose reward is the first observation's first value: the
    returns tell which episodes (which resets of the env's generator) were played."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        self.first = float(obs[0])
        return obs, info

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self.first, terminated, truncated, info


def choosing(config, weights, action):
    """`weights` with the advantage head rewired to always prefer `action`."""
    names = [name for name, _ in weight_layout(config)]
    out = [np.array(w) for w in weights]
    out[names.index("advantage/kernel")][:] = 0.0
    bias = out[names.index("advantage/bias")]
    bias[:] = 0.0
    bias[action] = 5.0
    return out


@pytest.fixture
def agent(make_config):
    """An agent that never trains (the warm-up is the whole replay): its weights stay."""
    agent = R2D2Agent(make_config(memory_warmup=64))
    agent.compile()
    return agent


def test_an_evaluation_plays_the_learners_current_weights(agent):
    callback = EvaluationCallback(make_env, episodes=5)
    good = choosing(agent.config, agent.learner.get_weights(), 1)
    agent.learner.set_weights(good)
    first = callback.evaluate(agent.learner, env_steps=100)
    agent.learner.set_weights(choosing(agent.config, good, 0))
    second = callback.evaluate(agent.learner, env_steps=200)
    assert (first.mean_return, first.returns) == (1.0, (1.0,) * 5)
    assert (second.mean_return, second.env_steps) == (0.0, 200)
    assert callback.evaluations == [first, second]


def test_the_best_evaluation_and_its_weights_are_kept(agent):
    callback = EvaluationCallback(make_env, episodes=3)
    bad = choosing(agent.config, agent.learner.get_weights(), 0)
    good = choosing(agent.config, bad, 1)
    for weights in (bad, good, bad):
        agent.learner.set_weights(weights)
        callback.evaluate(agent.learner, env_steps=0)
    assert callback.best is callback.evaluations[1]
    assert callback.best_mean == 1.0
    for kept, expected in zip(callback.best_weights, good, strict=True):
        np.testing.assert_array_equal(kept, expected)


def test_fit_evaluates_every_interval_in_env_steps(agent):
    callback = EvaluationCallback(make_env, interval=10, episodes=2)
    agent.fit(make_env(), nb_steps=35, verbose=0, callbacks=[callback])
    assert [e.env_steps for e in callback.evaluations] == [10, 20, 30]


def test_fit_with_several_envs_counts_the_interval_in_env_steps_of_all(make_config):
    agent = R2D2Agent(make_config(memory_warmup=64, envs_per_actor=3))
    agent.compile()
    callback = EvaluationCallback(make_env, interval=10, episodes=2)
    agent.fit([make_env() for _ in range(3)], nb_steps=36, verbose=0, callbacks=[callback])
    assert [e.env_steps for e in callback.evaluations] == [10, 20, 30]


def test_evaluations_play_new_episodes_from_a_seeded_start(agent):
    first, again = (EvaluationCallback(PaysTheStart, episodes=3, seed=7) for _ in range(2))
    a = first.evaluate(agent.learner, env_steps=0)
    b = first.evaluate(agent.learner, env_steps=0)
    c = again.evaluate(agent.learner, env_steps=0)
    assert a.returns == c.returns  # the same seed starts with the same episodes
    assert a.returns != b.returns  # later evaluations go on to new ones


def test_a_second_fit_goes_on_with_the_evaluation_envs_episodes(agent):
    callback = EvaluationCallback(PaysTheStart, interval=10, episodes=3)
    for _ in range(2):
        agent.fit(make_env(), nb_steps=10, verbose=0, callbacks=[callback])
    first, second = callback.evaluations
    assert second.env_steps == 20 and first.returns != second.returns


def test_restore_best_hands_the_best_weights_back_at_the_end_of_fit(agent):
    callback = EvaluationCallback(make_env, interval=10, episodes=2, restore_best=True)
    good = choosing(agent.config, agent.learner.get_weights(), 1)
    bad = choosing(agent.config, good, 0)
    agent.learner.set_weights(good)

    class SpoilAfterFirstEvaluation:
        """Sets the bad weights once the callback has evaluated the good ones."""

        def on_step_end(self, step, logs=None):
            if agent.step == 10:
                agent.learner.set_weights(bad)

    agent.fit(make_env(), nb_steps=25, verbose=0, callbacks=[callback, SpoilAfterFirstEvaluation()])
    assert [e.mean_return for e in callback.evaluations] == [1.0, 0.0]
    for now, expected in zip(agent.learner.get_weights(), good, strict=True):
        np.testing.assert_array_equal(now, expected)
    assert int(np.argmax(agent.compute_q_values(np.zeros(4, np.float32)))) == 1  # actor synced


def test_without_restore_best_the_last_weights_stay(agent):
    callback = EvaluationCallback(make_env, interval=10, episodes=2)
    good = choosing(agent.config, agent.learner.get_weights(), 1)
    agent.learner.set_weights(good)
    bad = choosing(agent.config, good, 0)

    class Spoil:
        def on_step_end(self, step, logs=None):
            if agent.step == 10:
                agent.learner.set_weights(bad)

    agent.fit(make_env(), nb_steps=15, verbose=0, callbacks=[callback, Spoil()])
    np.testing.assert_array_equal(agent.learner.get_weights()[-1], bad[-1])


def test_stop_at_ends_fit_at_the_first_evaluation_that_reaches_it(agent):
    agent.learner.set_weights(choosing(agent.config, agent.learner.get_weights(), 1))
    callback = EvaluationCallback(make_env, interval=10, episodes=2, stop_at=1.0)
    agent.fit(make_env(), nb_steps=100, verbose=0, callbacks=[callback])
    assert agent.step == 10
    assert "stop_at" in agent.stop_reason


def test_a_new_best_is_written_as_a_checkpoint_without_temp_files(agent, tmp_path):
    path = tmp_path / "best.h5"
    callback = EvaluationCallback(make_env, episodes=2, best_path=path)
    good = choosing(agent.config, agent.learner.get_weights(), 1)
    bad = choosing(agent.config, good, 0)
    for weights in (good, bad):  # the second is worse: not written
        agent.learner.set_weights(weights)
        callback.evaluate(agent.learner, env_steps=0)
    assert os.listdir(tmp_path) == ["best.h5"]
    agent.learner.load_weights(path)
    for now, expected in zip(agent.learner.get_weights(), good, strict=True):
        np.testing.assert_array_equal(now, expected)


def test_the_learner_hooks_evaluate_every_interval_in_updates_and_restore(agent):
    callback = EvaluationCallback(make_env, interval=2, episodes=2, restore_best=True)
    learner = agent.learner
    good = choosing(agent.config, learner.get_weights(), 1)
    learner.set_weights(good)
    callback.on_r2d2_learner_begin(learner)
    for updates in (1, 2, 3):
        learner.updates = updates
        callback.on_r2d2_learner_train_end(learner)
    learner.set_weights(choosing(agent.config, good, 0))
    learner.updates = 4
    callback.on_r2d2_learner_train_end(learner)
    callback.on_r2d2_learner_end(learner)
    assert [(e.updates, e.mean_return) for e in callback.evaluations] == [(2, 1.0), (4, 0.0)]
    np.testing.assert_array_equal(learner.get_weights()[-1], good[-1])


def test_the_mean_return_goes_to_the_run_log(agent, tmp_path):
    callback = EvaluationCallback(make_env, interval=10, episodes=2)
    run_log = RunLogCallback(tmp_path, tensorboard=False)
    agent.fit(make_env(), nb_steps=20, verbose=0, callbacks=[callback, run_log])
    records = read_run(tmp_path).metric("eval_mean_return")["agent"]
    assert [(r["env_steps"], r["value"]) for r in records] == [
        (e.env_steps, e.mean_return) for e in callback.evaluations
    ]
    assert len(records) == 2


def test_the_callback_pickles_without_its_env(agent):
    callback = EvaluationCallback(functools.partial(gym.make, "CartPole-v1"), episodes=1)
    callback.evaluate(agent.learner, env_steps=0)
    copy = pickle.loads(pickle.dumps(callback))
    assert copy._env is None and copy._actor is None
    assert copy.evaluations == callback.evaluations


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"make_env": "CartPole-v1"}, "make_env must be a zero-argument callable"),
        ({"make_env": lambda: PaysTheAction()}, "cannot be pickled"),
        ({"interval": 0}, "interval must be an int >= 1, got 0"),
        ({"episodes": 2.5}, "episodes must be an int >= 1, got 2.5"),
        ({"epsilon": 1.5}, r"epsilon must be None or in \[0, 1\], got 1.5"),
        ({"best_path": "best.txt"}, "best_path must end in .h5"),
        ({"stop_at": float("nan")}, "stop_at must be None or a finite number, got nan"),
        ({"max_episode_steps": 0}, "max_episode_steps must be None or an int >= 1, got 0"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvaluationCallback(**{"make_env": make_env, **kwargs})


# ------------------------------------------------------------------ a manager run ------
class Steer(R2D2Callback):
    """In the learner: weights that take action 1 from the start, action 0 from update
    `spoil_at` on (so that the first evaluation is the best and the last is not)."""

    def __init__(self, spoil_at: int) -> None:
        super().__init__()
        self.spoil_at = spoil_at

    def on_r2d2_learner_begin(self, learner) -> None:
        learner.set_weights(choosing(learner.config, learner.get_weights(), 1))

    def on_r2d2_learner_train_end(self, learner) -> None:
        if learner.updates == self.spoil_at:
            learner.set_weights(choosing(learner.config, learner.get_weights(), 0))


def test_a_manager_run_keeps_the_best_and_hands_it_back(make_config, tmp_path, assert_no_leftovers):
    config = make_config(memory_warmup=8, train_interval=1, actor_sync_interval=5)
    best_path = tmp_path / "best.h5"
    evaluation = EvaluationCallback(
        make_env, interval=10, episodes=3, best_path=best_path, restore_best=True
    )
    manager = R2D2Manager(
        make_env, config, actor_num=1, callbacks=[Steer(spoil_at=11), evaluation], progress=False
    )
    with manager:
        result = manager.train(nb_trains=40, max_seconds=120)
    assert_no_leftovers()
    assert result.stop_reason == "nb_trains"
    best = read_checkpoint(best_path, verify_replay=False)
    assert best.counters.learner_updates == 10  # the first evaluation, before the spoiling
    final = manager.latest_weights()
    for kept, handed_back in zip(best.online_weights, final, strict=True):
        np.testing.assert_array_equal(kept, handed_back)
    agent = manager.create_test_agent()
    assert int(np.argmax(agent.compute_q_values(np.zeros(4, np.float32)))) == 1
