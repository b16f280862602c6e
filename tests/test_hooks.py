"""No hook is skipped silently: keras-rl's hooks (`on_episode_end`, `on_train_begin`, ...)
run only in `R2D2Agent.fit`/`test`, so an `R2D2Manager` given a callback that implements
one, without the manager hook that stands for it, warns once, at construction, naming
each such hook and the `on_r2d2_*` hook to use instead. Only construction is needed: no
process starts in these tests.
"""

from __future__ import annotations

import functools
import warnings

import gymnasium as gym
import pytest

from r2d2_agent import R2D2Manager
from r2d2_agent.callbacks import (
    CheckpointCallback,
    R2D2Callback,
    RunLogCallback,
    TensorBoardCallback,
)
from r2d2_agent.compat import rl_callbacks
from r2d2_agent.roles.hooks import skipped_keras_rl_hooks

CARTPOLE = functools.partial(gym.make, "CartPole-v1")


class EpisodeEnds(R2D2Callback):
    def on_episode_end(self, episode, logs=None):
        pass


class TrainBeginAndActions(R2D2Callback):
    def on_train_begin(self, logs=None):
        pass

    def on_action_end(self, action, logs=None):
        pass


class BothEpisodeHooks(R2D2Callback):
    """For the agent and for the manager: nothing is skipped."""

    def on_episode_end(self, episode, logs=None):
        pass

    def on_r2d2_actor_episode_end(self, actor_index, runner, episode):
        pass


class DuckEpisodeEnds:
    def on_episode_end(self, episode, logs=None):
        pass


def _manager_warnings(make_config, callback):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        R2D2Manager(CARTPOLE, make_config(), callbacks=[callback], progress=False)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_manager_warns_about_an_episode_hook_it_will_not_run(make_config):
    (message,) = _manager_warnings(make_config, EpisodeEnds())
    assert "EpisodeEnds.on_episode_end" in message
    assert "on_r2d2_actor_episode_end" in message


def test_the_warning_names_each_skipped_hook_and_its_replacement(make_config):
    (message,) = _manager_warnings(make_config, TrainBeginAndActions())
    assert "TrainBeginAndActions.on_train_begin" in message
    assert "TrainBeginAndActions.on_action_end" in message
    assert "on_r2d2_train_begin" in message and "on_r2d2_actor_begin" in message


def test_a_duck_typed_callback_is_warned_about_too(make_config):
    (message,) = _manager_warnings(make_config, DuckEpisodeEnds())
    assert "DuckEpisodeEnds.on_episode_end" in message


@pytest.mark.parametrize(
    "callback",
    [
        BothEpisodeHooks(),
        R2D2Callback(),
        CheckpointCallback("ckpt"),
        RunLogCallback("run"),
        TensorBoardCallback("tb"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_no_warning_when_the_manager_hooks_are_implemented(make_config, callback):
    assert _manager_warnings(make_config, callback) == []


def test_keras_rl_defaults_do_not_count_as_implemented():
    class OnlyEpisodeEnd(rl_callbacks.Callback):
        def on_episode_end(self, episode, logs=None):
            pass

    assert [hook for hook, _ in skipped_keras_rl_hooks(OnlyEpisodeEnd())] == ["on_episode_end"]
