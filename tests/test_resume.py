"""Resuming and the errors around it: `R2D2Agent.fit(resume_from=...)`, `load_weights` on
bad files, `R2D2Manager.train(resume_from=...)` refusing bad checkpoints before any child
starts, and a callback ending `fit` with `request_stop`.

The learning test trains the CartPole preset until the mean return of 10 episodes reaches
`TRAINED` (a callback stops `fit` there), checkpoints, and resumes in a fresh agent of
another seed: its first episodes must be far above an untrained agent's.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent, R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, R2D2Callback
from r2d2_agent.checkpoints import (
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    MissingCheckpointError,
    WeightsFileError,
    read_checkpoint,
    write_checkpoint,
)
from r2d2_agent.math import resumed_seed
from r2d2_agent.presets import cartpole_config

CARTPOLE = functools.partial(gym.make, "CartPole-v1")
LEARNING = dict(memory_warmup=4, train_interval=2, actor_sync_interval=10, seed=3)
TRAINED = 60.0  # mean return of 10 episodes; untrained CartPole agents score about 10-30


class StopAtMeanReturn(R2D2Callback):
    """The README's early-stopping callback: stops `fit` (or a manager run) once the mean
    return of the last `window` episodes reaches `threshold`."""

    def __init__(self, threshold: float, window: int = 10) -> None:
        super().__init__()
        self.threshold = threshold
        self.window = window
        self.returns: list[float] = []

    def on_episode_end(self, episode, logs=None):  # single-process agent
        self._seen(logs["episode_reward"])

    def on_r2d2_actor_episode_end(self, actor_index, runner, episode):  # manager actors
        self._seen(episode.episode_return)

    def _seen(self, episode_return: float) -> None:
        self.returns.append(float(episode_return))
        recent = self.returns[-self.window :]
        if len(recent) == self.window and np.mean(recent) >= self.threshold:
            self.request_stop(f"mean return {np.mean(recent):.1f} >= {self.threshold}")


class ReplaySizeAtFirstStep(R2D2Callback):
    """Records the agent's replay size when its first step begins."""

    def __init__(self) -> None:
        super().__init__()
        self.size: int | None = None

    def on_step_begin(self, step, logs=None):
        if self.size is None:
            self.size = len(self.model.learner.replay)


class StopAtStep(R2D2Callback):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def on_step_end(self, step, logs=None):
        if self.model.step >= self.step:
            self.request_stop("enough")


@pytest.fixture(scope="module")
def make_agent(make_config):
    def factory(**overrides):
        agent = R2D2Agent(make_config(**{**LEARNING, **overrides}))
        agent.compile()
        return agent

    return factory


@pytest.fixture(scope="module")
def short_fit(make_agent, tmp_path_factory):
    """300 env steps with a checkpoint every 100, then a fresh agent resumed to 500."""
    directory = tmp_path_factory.mktemp("short")
    env = gym.make("CartPole-v1")
    first = make_agent()
    first.fit(env, nb_steps=300, verbose=0, callbacks=[CheckpointCallback(str(directory), 100)])
    state = read_checkpoint(directory)
    second = make_agent(seed=4)
    history = second.fit(env, nb_steps=500, verbose=0, resume_from=str(directory))
    env.close()
    return first, state, second, history


def test_fit_resume_counts_nb_steps_as_a_total(short_fit):
    _, state, second, _ = short_fit
    assert state.counters.env_steps == 300 and second.step == 500


def test_fit_resume_continues_the_learner_updates(short_fit):
    first, state, second, _ = short_fit
    assert state.counters.learner_updates == first.learner.updates
    assert second.learner.updates > first.learner.updates


def test_fit_resume_continues_the_episode_count(short_fit):
    _, state, second, history = short_fit
    assert second.episodes == state.counters.episodes + len(history.history["episode_reward"])


def test_checkpoints_hold_no_replay_unless_asked(short_fit):
    _, state, _, _ = short_fit
    assert state.replay is None


def test_fit_resumed_from_a_checkpoint_with_replay_starts_with_the_saved_replay(
    make_agent, cartpole, tmp_path
):
    first = make_agent()
    saver = CheckpointCallback(str(tmp_path), 100, save_replay=True)
    first.fit(cartpole, nb_steps=150, verbose=0, callbacks=[saver])
    saved = len(first.learner.replay)  # the last checkpoint is written at the end
    probe = ReplaySizeAtFirstStep()
    second = make_agent(seed=4)
    second.fit(cartpole, nb_steps=160, verbose=0, resume_from=str(tmp_path), callbacks=[probe])
    assert read_checkpoint(tmp_path).replay.size == saved > 0
    assert probe.size == saved


def test_agent_save_checkpoint_with_replay_restores_the_replay(make_agent, cartpole, tmp_path):
    first = make_agent()
    first.fit(cartpole, nb_steps=150, verbose=0)
    path = first.save_checkpoint(tmp_path / "with_replay.h5", save_replay=True)
    second = make_agent(seed=4)
    second.restore_checkpoint(path)
    assert len(second.learner.replay) == len(first.learner.replay) > 0


class RecordResetsAndActions(gym.Wrapper):
    """Keeps the seed of every reset and every action taken."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.seeds: list[int | None] = []
        self.actions: list[int] = []

    def reset(self, *, seed=None, options=None):
        self.seeds.append(seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.actions.append(int(action))
        return self.env.step(action)


def _fit_recording(agent, nb_steps, **kwargs) -> list[RecordResetsAndActions]:
    """`agent.fit` on `envs_per_actor` recording CartPoles; returns them."""
    n = agent.config.envs_per_actor
    envs = [RecordResetsAndActions(gym.make("CartPole-v1")) for _ in range(n)]
    agent.fit(envs[0] if n == 1 else envs, nb_steps=nb_steps, verbose=0, **kwargs)
    return envs


@pytest.mark.parametrize("n", [1, 2], ids=["one env", "two envs per actor"])
def test_a_resumed_fit_meets_new_episodes_not_the_runs_first(make_agent, tmp_path, n):
    first = make_agent(epsilon=1.0, envs_per_actor=n)  # every action a random draw
    first_envs = _fit_recording(first, 60)
    checkpoint = first.save_checkpoint(tmp_path / "at_60.h5")
    resumed, again = (
        _fit_recording(make_agent(epsilon=1.0, envs_per_actor=n), 120, resume_from=checkpoint)
        for _ in range(2)
    )

    seed, start = LEARNING["seed"], resumed_seed(LEARNING["seed"], first.step)
    for j in range(n):
        assert first_envs[j].seeds[0] == seed + j
        assert resumed[j].seeds[0] == start + j != seed + j
        assert resumed[j].actions[:20] != first_envs[j].actions[:20]  # new exploration draws
        assert (again[j].seeds, again[j].actions) == (resumed[j].seeds, resumed[j].actions)


def test_fit_resume_from_an_incompatible_checkpoint_is_refused_before_training(
    short_fit, make_agent, cartpole, tmp_path
):
    first, _, _, _ = short_fit
    path = first.save_checkpoint(tmp_path / "c.h5")
    other = make_agent(lstm_units=4)
    with pytest.raises(IncompatibleCheckpointError, match="lstm_units: 8 in the checkpoint, 4"):
        other.fit(cartpole, nb_steps=100, verbose=0, resume_from=path)
    assert other.step == 0


def test_fit_resume_from_a_weights_file_says_it_is_one_and_how_to_load_it(
    make_agent, cartpole, tmp_path
):
    path = tmp_path / "weights.h5"
    make_agent().save_weights(str(path))
    agent = make_agent()
    with pytest.raises(WeightsFileError, match=r"weights\.h5 is a weights file") as info:
        agent.fit(cartpole, nb_steps=100, verbose=0, resume_from=path)
    assert "load_weights" in str(info.value) and "corrupt" not in str(info.value)
    assert agent.step == 0


def test_a_callback_request_stop_ends_fit_before_the_next_step(make_agent, cartpole):
    agent = make_agent()
    agent.fit(cartpole, nb_steps=1000, verbose=0, callbacks=[StopAtStep(50)])
    assert agent.step == 50 and agent.stop_reason == "enough"


def test_request_stop_outside_a_run_raises():
    with pytest.raises(RuntimeError, match="request_stop"):
        StopAtStep(1).request_stop()


# ----------------------------------------------------------------- keeps learning ----
@pytest.fixture(scope="module")
def trained_then_resumed(tmp_path_factory):
    """Train the preset to `TRAINED`, checkpoint; resume in another seed's agent for 400
    more env steps; an untrained agent of that seed plays the same 400 steps."""
    path = tmp_path_factory.mktemp("trained") / "trained.h5"
    env = gym.make("CartPole-v1")
    teacher = R2D2Agent(cartpole_config(seed=0))
    teacher.compile()
    stopper = StopAtMeanReturn(TRAINED)
    teacher.fit(env, nb_steps=20_000, verbose=0, callbacks=[stopper])
    teacher.save_checkpoint(path)
    resumed = R2D2Agent(cartpole_config(seed=7))
    resumed.compile()
    after = resumed.fit(env, nb_steps=teacher.step + 400, verbose=0, resume_from=path)
    fresh = R2D2Agent(cartpole_config(seed=7))
    fresh.compile()
    untrained = fresh.fit(env, nb_steps=400, verbose=0)
    env.close()
    return teacher, stopper, after.history["episode_reward"], untrained.history["episode_reward"]


def test_training_reached_the_threshold_and_the_callback_stopped_it(trained_then_resumed):
    teacher, stopper, _, _ = trained_then_resumed
    assert teacher.stop_reason.startswith("mean return") and teacher.step < 20_000
    assert np.mean(stopper.returns[-10:]) >= TRAINED


def test_the_return_after_resume_is_not_reset_to_the_untrained_level(trained_then_resumed):
    _, _, after, untrained = trained_then_resumed
    assert np.mean(after) >= 0.6 * TRAINED > np.mean(untrained)


# ----------------------------------------------------------------- load_weights ------
def test_load_weights_of_a_truncated_file_names_it_and_says_what_to_do(make_agent, tmp_path):
    agent = make_agent()
    path = tmp_path / "w.h5"
    agent.save_weights(str(path))
    with open(path, "r+b") as file:
        file.truncate(200)
    with pytest.raises(OSError, match=r"w\.h5 cannot be read: it is truncated") as info:
        agent.load_weights(str(path))
    assert isinstance(info.value, CorruptCheckpointError)
    assert "load an earlier file" in str(info.value)


def test_load_weights_of_a_missing_file_names_it(make_agent, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.h5 does not exist"):
        make_agent().load_weights(str(tmp_path / "nope.h5"))


def test_load_weights_of_another_network_names_the_file(make_agent, tmp_path):
    path = tmp_path / "small.h5"
    make_agent(dense_units=4).save_weights(str(path))
    with pytest.raises(ValueError, match="small.h5 does not fit this network"):
        make_agent().load_weights(str(path))


def test_load_weights_takes_a_checkpoint(make_agent, tmp_path):
    source = make_agent(seed=11)
    path = source.save_checkpoint(tmp_path / "c.h5")
    target = make_agent(seed=12)
    target.load_weights(path)
    for a, b in zip(target.learner.get_weights(), source.learner.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------- the manager -------
@pytest.fixture(scope="module")
def saved(make_agent, tmp_path_factory):
    """A checkpoint of the tiny config, and the directory it is in."""
    directory = tmp_path_factory.mktemp("saved")
    path = make_agent().save_checkpoint(directory / "ckpt-0000000001.h5")
    return directory, path


@pytest.mark.usefixtures("no_leftovers")
def test_manager_refuses_a_missing_checkpoint_before_any_child(make_config, tmp_path):
    manager = R2D2Manager(CARTPOLE, make_config(), progress=False)
    with pytest.raises(MissingCheckpointError, match="gone.h5 does not exist"):
        manager.train(nb_steps=100, resume_from=tmp_path / "gone.h5")


@pytest.mark.usefixtures("no_leftovers")
def test_manager_refuses_a_truncated_checkpoint_before_any_child(make_config, saved, tmp_path):
    _, path = saved
    broken = tmp_path / "broken.h5"
    broken.write_bytes(open(path, "rb").read()[:300])
    manager = R2D2Manager(CARTPOLE, make_config(), progress=False)
    with pytest.raises(CorruptCheckpointError, match="broken.h5 cannot be read"):
        manager.train(nb_steps=100, resume_from=broken)


@pytest.mark.usefixtures("no_leftovers")
def test_manager_resumed_from_a_weights_file_says_it_is_one_and_how_to_load_it(
    make_config, make_agent, tmp_path
):
    path = tmp_path / "weights.h5"
    make_agent().save_weights(str(path))
    manager = R2D2Manager(CARTPOLE, make_config(), progress=False)
    with pytest.raises(WeightsFileError, match=r"weights\.h5 is a weights file") as info:
        manager.train(nb_steps=100, resume_from=path)
    assert "load_weights" in str(info.value) and "corrupt" not in str(info.value)


@pytest.mark.usefixtures("no_leftovers")
def test_manager_refuses_a_replay_of_another_memory_capacity_before_any_child(
    make_config, make_agent, tmp_path
):
    path = write_checkpoint(tmp_path / "r.h5", make_agent().learner.save(replay=True))
    manager = R2D2Manager(CARTPOLE, make_config(memory_capacity=32), progress=False)
    with pytest.raises(
        IncompatibleCheckpointError, match="memory_capacity: 64 in the checkpoint's replay, 32"
    ):
        manager.train(nb_steps=100, resume_from=path)


@pytest.mark.usefixtures("no_leftovers")
def test_manager_refuses_an_incompatible_checkpoint_naming_the_fields(make_config, saved):
    directory, _ = saved
    manager = R2D2Manager(CARTPOLE, make_config(dense_units=16), progress=False)
    with pytest.raises(IncompatibleCheckpointError, match="dense_units: 8 in the checkpoint, 16"):
        manager.train(nb_steps=100, resume_from=directory)
