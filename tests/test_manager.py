"""Tests of `R2D2Manager`: real actor and learner processes (spawn), faults, shutdown.

Each run starts a TensorFlow learner process (about 3-5 s on a small machine), so the runs
are few and tiny: each one is a module-scoped fixture that runs once and keeps what its
tests check (the manager itself is dropped before the tests see the run). Runs that do not
need learning keep the learner in its warm-up (replay never fills), so it never traces its
training graph. Every test, and every run's fixture, checks that no child process and no
shared-memory segment is left behind.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from interrupting import interrupt_script, run_script

from r2d2_agent.config import InputType
from r2d2_agent.distributed import R2D2Manager, R2D2ProcessError, TrainResult, describe_exit
from r2d2_agent.distributed.supervision import stop_signals
from r2d2_agent.leftovers import find_mp_folders, reclaim_mp_folders
from r2d2_agent.networks.numpy_net import weight_layout
from r2d2_agent.networks.weights_io import split_published

pytestmark = pytest.mark.usefixtures("no_leftovers")

CARTPOLE = functools.partial(gym.make, "CartPole-v1")  # a picklable env factory

MANAGER = dict(memory_capacity=200, actor_sync_interval=50)
"""On top of `make_config`'s tiny CartPole: a replay of 200 sequences, so that the warm-up
of `NO_TRAINING` fits in it, and a weights pull every 50 env steps, so that each actor of the
800-step run pulls several times."""

NO_TRAINING = dict(memory_warmup=200)  # replay never fills: the learner only receives


@pytest.fixture(scope="module")
def manager_config(make_config):
    """Factory: the tiny CartPole config with `MANAGER` and `overrides` applied."""
    return lambda **overrides: make_config(**{**MANAGER, **overrides})


# Callbacks pickled into the children (module level, duck-typed: no TensorFlow import).
class FailingActorCallback:
    """Actor `index` raises at its first episode end; restarted, it raises at start-up."""

    def __init__(self, index: int) -> None:
        self.index = index

    def on_r2d2_actor_episode_end(self, actor_index, runner, result):
        if actor_index == self.index and runner.stream == actor_index:  # first process
            raise ValueError(f"boom in actor {actor_index} after {runner.steps} env steps")

    def on_r2d2_actor_begin(self, actor_index, runner):
        if actor_index == self.index and runner.stream != actor_index:  # a restarted one
            raise ValueError(f"boom in actor {actor_index} at start-up")


class FailingLearnerCallback:
    def on_r2d2_learner_begin(self, learner):
        raise ValueError("boom in the learner")


class SlowLearnerStart:
    """Long legitimate work in a learner hook (as a checkpoint writing a replay)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_r2d2_learner_begin(self, learner):
        time.sleep(self.seconds)


class ParentHooks:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_r2d2_train_begin(self):
        self.calls.append("begin")

    def on_r2d2_train_end(self):
        self.calls.append("end")


def _pendulum():
    return gym.make("Pendulum-v1")


class _ResetFails(gym.Wrapper):
    def reset(self, **kwargs):
        raise KeyError("no such level")


def _cartpole_failing_reset():
    return _ResetFails(gym.make("CartPole-v1"))


# ----------------------------------------------------------------- bad inputs ------
# Each bad input raises in the parent, before any child process starts (`no_leftovers`).
def test_unpicklable_env_factory_is_rejected(manager_config):
    with pytest.raises(TypeError, match="env_factory must be picklable"):
        R2D2Manager(lambda: gym.make("CartPole-v1"), manager_config())


def test_env_with_a_continuous_action_space_is_rejected(manager_config):
    with pytest.raises(ValueError, match="continuous action space"):
        R2D2Manager(_pendulum, manager_config(input_shape=(3,)))


@pytest.mark.parametrize("actor_num", [0, -1, 1.5, True])
def test_actor_num_that_is_not_a_positive_int_is_rejected(manager_config, actor_num):
    with pytest.raises(ValueError, match="actor_num"):
        R2D2Manager(CARTPOLE, manager_config(), actor_num=actor_num)


def test_env_observation_shape_differing_from_the_config_is_rejected(manager_config):
    with pytest.raises(
        ValueError,
        match=r"observation shape \(4,\) does not match config.input_shape \(5,\)",
    ):
        R2D2Manager(CARTPOLE, manager_config(input_shape=(5,)))


def test_env_action_count_differing_from_the_config_is_rejected(manager_config):
    with pytest.raises(ValueError, match="the env has 2 actions but config.nb_actions is 3"):
        R2D2Manager(CARTPOLE, manager_config(nb_actions=3))


def test_env_failing_in_reset_is_rejected_before_any_child_starts(manager_config):
    with pytest.raises(ValueError, match=r"reset\(\) failed: KeyError") as info:
        R2D2Manager(_cartpole_failing_reset, manager_config())
    assert isinstance(info.value.__cause__, KeyError)


def test_config_that_is_not_an_r2d2config_is_rejected():
    with pytest.raises(TypeError, match="R2D2Config"):
        R2D2Manager(CARTPOLE, {"input_shape": (4,)})


@pytest.mark.parametrize("value", [0, -1.0, "300", True, float("nan"), float("inf")])
def test_stall_timeout_that_is_not_a_positive_number_or_none_is_rejected(manager_config, value):
    with pytest.raises(ValueError, match="stall_timeout"):
        R2D2Manager(CARTPOLE, manager_config(), stall_timeout=value)


def test_numpy_policy_for_image_inputs_is_rejected(manager_config):
    with pytest.raises(ValueError, match="use_numpy_policy"):
        R2D2Manager(
            CARTPOLE,
            manager_config(input_shape=(4, 1, 1), input_type=InputType.COLOR),
            use_numpy_policy=True,
        )


def test_train_without_any_limit_is_rejected(manager_config):
    manager = R2D2Manager(CARTPOLE, manager_config())
    with pytest.raises(ValueError, match="at least one limit"):
        manager.train()


def test_train_with_zero_nb_steps_is_rejected(manager_config):
    manager = R2D2Manager(CARTPOLE, manager_config())
    with pytest.raises(ValueError, match="nb_steps"):
        manager.train(nb_steps=0)


def test_create_test_agent_before_train_raises(manager_config):
    manager = R2D2Manager(CARTPOLE, manager_config())
    with pytest.raises(RuntimeError, match="call train"):
        manager.create_test_agent()


# ----------------------------------------------------------------- a real run ------
def _two_actor_run(config):
    """One learning run of two actors to 800 env steps; the test agent made after it."""
    hooks = ParentHooks()
    manager = R2D2Manager(
        CARTPOLE, config, actor_num=2, callbacks=[hooks], progress=False, publish_interval=5
    )
    snapshots: list = []
    with manager:
        result = manager.train(nb_steps=800, max_seconds=150, on_progress=snapshots.append)
    return SimpleNamespace(
        config=config,
        result=result,
        snapshots=snapshots,
        hook_calls=hooks.calls,
        latest_weights=manager.latest_weights(),
        published=manager._final_weights,  # what the learner published last, as it is
        test_agent=manager.create_test_agent(),
    )


@pytest.fixture(scope="module")
def two_actor_run(manager_config, assert_no_leftovers):
    # With the greedy policy's average: the learner publishes two weight sets, the actors
    # explore with the first, the parent plays the second.
    run = _two_actor_run(manager_config(policy_average_updates=5))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_run_returns_a_train_result(two_actor_run):
    assert isinstance(two_actor_run.result, TrainResult)


def test_run_stops_for_nb_steps(two_actor_run):
    assert two_actor_run.result.stop_reason == "nb_steps"


def test_run_stops_within_actor_num_minus_one_steps_past_nb_steps(two_actor_run):
    assert 800 <= two_actor_run.result.env_steps <= 800 + (2 - 1)


def test_per_actor_env_steps_sum_to_the_total(two_actor_run):
    result = two_actor_run.result
    assert sum(result.actor_env_steps) == result.env_steps


def test_every_actor_stepped(two_actor_run):
    assert all(steps > 0 for steps in two_actor_run.result.actor_env_steps)


def test_step_and_update_counts_are_python_ints(two_actor_run):
    result = two_actor_run.result
    assert all(isinstance(n, int) for n in (result.env_steps, result.learner_updates))


def test_learner_trained(two_actor_run):
    assert two_actor_run.result.learner_updates > 0


def test_learner_published_weights(two_actor_run):
    assert two_actor_run.result.weights_version >= 1


def test_learner_received_sequences(two_actor_run):
    assert two_actor_run.result.sequences_received > 0


def test_no_actor_was_restarted(two_actor_run):
    assert two_actor_run.result.actor_restarts == [0, 0]


def test_every_actor_reports_episode_returns(two_actor_run):
    returns = two_actor_run.result.episode_returns
    assert len(returns) == 2 and all(returns)


def test_recent_mean_return_is_positive(two_actor_run):
    assert two_actor_run.result.recent_mean_return() > 0


def test_learner_reports_where_its_time_went(two_actor_run):
    seconds = two_actor_run.result.learner_info["seconds"]
    assert seconds["learning"] > 0 and seconds["total"] >= seconds["learning"]


def test_every_actor_reports_where_its_time_went(two_actor_run):
    for info in two_actor_run.result.actor_info:
        assert info["seconds"]["acting"] > 0 and info["seconds"]["total"] > 0


def test_numpy_actors_never_load_tensorflow(two_actor_run):
    for info in two_actor_run.result.actor_info:
        assert info["policy"] == "NumpyNetwork" and info["tensorflow_loaded"] is False


def test_every_actor_pulls_weights_during_the_run(two_actor_run):
    assert all(info["weight_pulls"] >= 2 for info in two_actor_run.result.actor_info)


def test_progress_snapshots_never_exceed_the_final_step_count(two_actor_run):
    snapshots = two_actor_run.snapshots
    assert snapshots and snapshots[-1].env_steps <= two_actor_run.result.env_steps


def test_rate_limiter_keeps_updates_near_env_steps_per_train_interval(two_actor_run):
    result, config = two_actor_run.result, two_actor_run.config
    tolerance = 16  # the manager's default ratio tolerance, in updates
    assert result.learner_updates <= result.env_steps / config.train_interval + tolerance + 1


def test_train_hooks_run_begin_and_end_in_the_parent(two_actor_run):
    assert two_actor_run.hook_calls == ["begin", "end"]


def test_test_agent_holds_the_latest_weights(two_actor_run):
    got = two_actor_run.test_agent.learner.get_weights()
    for got_array, want in zip(got, two_actor_run.latest_weights, strict=True):
        np.testing.assert_array_equal(got_array, want)


def test_latest_weights_are_the_policy_average_not_the_online_weights(two_actor_run):
    online, policy = split_published(two_actor_run.published, averaged=True)
    assert len(online) == len(policy) == len(two_actor_run.latest_weights)
    assert all(
        np.array_equal(a, b) for a, b in zip(policy, two_actor_run.latest_weights, strict=True)
    )
    assert not all(np.array_equal(a, b) for a, b in zip(online, policy, strict=True))


def test_test_agent_computes_q_values_of_one_observation(two_actor_run):
    q = two_actor_run.test_agent.compute_q_values(np.zeros(4, np.float32))
    assert q.shape == (2,)


# ------------------------------------------------------------ stop on request ------
def _requested_stop(config):
    """A run that the progress hook stops after 100 env steps, then 2 evaluation episodes."""
    manager = R2D2Manager(CARTPOLE, config, actor_num=1, progress=False)

    def on_progress(p):
        if p.env_steps >= 100:
            manager.request_stop()

    result = manager.train(max_seconds=120, on_progress=on_progress)
    returns = manager.evaluate(2, seed=0)  # greedy, in this process, latest weights
    return SimpleNamespace(result=result, evaluation_returns=returns, manager=manager)


@pytest.fixture(scope="module")
def requested_stop(manager_config, assert_no_leftovers):
    run = _requested_stop(manager_config(**NO_TRAINING))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_request_stop_from_the_progress_hook_stops_the_run(requested_stop):
    result = requested_stop.result
    assert result.stop_reason == "requested" and result.env_steps >= 100


def test_evaluate_plays_the_requested_episodes_with_the_latest_weights(requested_stop):
    returns = requested_stop.evaluation_returns
    assert len(returns) == 2 and all(r > 0 for r in returns)


class ActionLog(gym.Wrapper):
    """Records the actions played in it."""

    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(int(action))
        return self.env.step(action)


@pytest.mark.parametrize("favoured", [0, 1])
def test_evaluate_plays_the_weights_it_is_given(requested_stop, favoured):
    """All-zero weights but the output layer's bias, which favours one action."""
    manager = requested_stop.manager
    layout = [name for name, _ in weight_layout(manager.config)]
    bias = "advantage/bias" if "advantage/bias" in layout else "q/bias"
    weights = [np.zeros_like(w) for w in manager.latest_weights()]
    weights[layout.index(bias)][favoured] = 1.0
    env = ActionLog(CARTPOLE())
    returns = manager.evaluate(1, env=env, seed=0, weights=weights)
    assert len(returns) == 1 and env.actions and set(env.actions) == {favoured}


# ----------------------------------------------------------------- faults ----------
@pytest.mark.parametrize(
    ("exitcode", "description"),
    [(-9, "killed by SIGKILL"), (1, "exit code 1"), (None, "still running")],
)
def test_describe_exit_puts_an_exit_code_in_words(exitcode, description):
    assert describe_exit(exitcode) == description


def _killed_actor(config):
    """A one-actor run (one restart allowed) whose actor is killed twice with SIGKILL: once
    after 200 env steps, and again once its restarted process delivers data."""
    manager = R2D2Manager(CARTPOLE, config, actor_num=1, max_actor_restarts=1, progress=False)
    state: dict = {"kills": []}

    def on_progress(p):
        pid = p.actor_pids[0]
        if pid is None:
            return
        if not state["kills"] and p.actor_env_steps[0] >= 200:
            state["received_at_kill"] = p.sequences_received
            state["kills"].append((pid, time.monotonic()))
            os.kill(pid, signal.SIGKILL)
        elif (
            len(state["kills"]) == 1
            and p.actor_restarts == (1,)
            and pid != state["kills"][0][0]
            and p.sequences_received >= state["received_at_kill"] + 20
        ):
            # the restarted actor's new pipe reaches the learner: data flows again
            state["kills"].append((pid, time.monotonic()))
            os.kill(pid, signal.SIGKILL)

    with pytest.raises(R2D2ProcessError) as info:
        manager.train(max_seconds=120, on_progress=on_progress)
    return SimpleNamespace(
        kills=state["kills"],
        error=info.value,
        detected_after=time.monotonic() - state["kills"][-1][1],
        latest_weights=manager.latest_weights(),
    )


@pytest.fixture(scope="module")
def killed_actor(manager_config, assert_no_leftovers):
    run = _killed_actor(manager_config(**NO_TRAINING))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_killed_actor_is_restarted_and_its_new_process_delivers_data(killed_actor):
    assert len(killed_actor.kills) == 2  # the second kill needs the restart's data


def test_actor_killed_past_max_actor_restarts_fails_the_run(killed_actor):
    error = killed_actor.error
    assert error.role == "actor" and error.index == 0 and error.exitcode == -signal.SIGKILL


def test_actor_failure_message_names_the_signal_and_the_restart_limit(killed_actor):
    message = str(killed_actor.error)
    assert "killed by SIGKILL" in message and "max_actor_restarts=1" in message


def test_killed_actor_is_detected_well_before_the_runs_time_limit(killed_actor):
    # Detection takes well under a second on a quiet machine; the bound leaves room for a
    # loaded one (8 s seen at load 12 on 2 cores) while a missed death would run to 120 s.
    assert killed_actor.detected_after < 20.0


def test_latest_weights_survive_a_failed_run(killed_actor):
    assert killed_actor.latest_weights is not None  # kept from the shared segment


def _actor_exception(config):
    """The error of a run whose only actor raises at its first episode end, and restarted,
    at start-up (three restarts allowed), and the restarts it got."""
    manager = R2D2Manager(
        CARTPOLE,
        config,
        actor_num=1,
        callbacks=[FailingActorCallback(index=0)],
        max_actor_restarts=3,
        progress=False,
    )
    restarts: list = []
    with pytest.raises(R2D2ProcessError) as info:
        manager.train(max_seconds=120, on_progress=lambda p: restarts.append(p.actor_restarts))
    return SimpleNamespace(error=info.value, restarts=max(restarts))


@pytest.fixture(scope="module")
def actor_exception(manager_config, assert_no_leftovers):
    run = _actor_exception(manager_config(**NO_TRAINING))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_actor_exception_after_env_steps_restarts_the_actor(actor_exception):
    assert actor_exception.restarts == (1,)


def test_actor_failing_before_its_first_env_step_stops_the_run_at_once(actor_exception):
    error = actor_exception.error
    assert error.role == "actor" and error.index == 0
    assert error.exitcode == 1 and "(exit code 1)" in str(error)
    assert "failed before its first env step" in str(error)  # not retried: it would repeat


def test_actor_exception_is_reported_with_the_childs_traceback(actor_exception):
    message = str(actor_exception.error)
    assert "Traceback (most recent call last)" in message
    assert "ValueError: boom in actor 0 at start-up" in message
    assert "on_r2d2_actor_begin" in actor_exception.error.child_traceback


def _learner_exception(config):
    """The error of a run whose learner raises in its begin hook, and the run's duration."""
    manager = R2D2Manager(
        CARTPOLE, config, actor_num=1, callbacks=[FailingLearnerCallback()], progress=False
    )
    t0 = time.monotonic()
    with pytest.raises(R2D2ProcessError) as info:
        manager.train(max_seconds=120)
    return SimpleNamespace(error=info.value, seconds=time.monotonic() - t0)


@pytest.fixture(scope="module")
def learner_exception(manager_config, assert_no_leftovers):
    run = _learner_exception(manager_config(**NO_TRAINING))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_learner_exception_stops_the_run_well_before_its_time_limit(learner_exception):
    assert learner_exception.seconds < 60


def test_learner_exception_fails_the_run_naming_the_learner(learner_exception):
    error = learner_exception.error
    assert "learner failed" in str(error)
    assert error.role == "learner" and error.exitcode == 1


def test_learner_exception_is_reported_with_the_childs_traceback(learner_exception):
    message = str(learner_exception.error)
    assert "ValueError: boom in the learner" in message
    assert "Traceback (most recent call last)" in message


# ----------------------------------------------------------------- stalls ----------
STALL_TIMEOUT = 5.0


def _stalled_children(config):
    """A one-actor run (one restart allowed, `stall_timeout=STALL_TIMEOUT`) whose learner
    first spends 1.5 stall timeouts in its begin hook; then its actor is frozen with
    SIGSTOP after 200 env steps, and once the restarted actor delivers data, the learner."""
    manager = R2D2Manager(
        CARTPOLE,
        config,
        actor_num=1,
        callbacks=[SlowLearnerStart(1.5 * STALL_TIMEOUT)],
        max_actor_restarts=1,
        stall_timeout=STALL_TIMEOUT,
        progress=False,
    )
    state: dict = {"frozen": []}

    def on_progress(p):
        pid, frozen = p.actor_pids[0], state["frozen"]
        if pid is None:
            return
        if not frozen and p.actor_env_steps[0] >= 200:
            state["received_at_freeze"] = p.sequences_received
            frozen.append(("actor", pid, time.monotonic()))
            os.kill(pid, signal.SIGSTOP)
        elif (
            len(frozen) == 1
            and p.actor_restarts == (1,)
            and pid != frozen[0][1]
            and p.sequences_received >= state["received_at_freeze"] + 20
        ):
            frozen.append(("learner", p.learner_pid, time.monotonic()))
            os.kill(p.learner_pid, signal.SIGSTOP)

    with pytest.raises(R2D2ProcessError) as info:
        manager.train(max_seconds=120, on_progress=on_progress)
    frozen = state["frozen"]
    return SimpleNamespace(
        frozen=[(role, pid) for role, pid, _ in frozen],
        error=info.value,
        detected_after=time.monotonic() - frozen[-1][2],
        alive=[pid for _, pid, _ in frozen if os.path.exists(f"/proc/{pid}")],
    )


@pytest.fixture(scope="module")
def stalled_children(manager_config, assert_no_leftovers):
    run = _stalled_children(manager_config(**NO_TRAINING))
    assert_no_leftovers()
    yield run
    assert_no_leftovers()


def test_long_work_in_a_learner_hook_is_not_a_stall_and_a_frozen_actor_is_restarted(
    stalled_children,
):
    # the learner froze second: its hook outlasted the timeout, the actor was restarted
    assert [role for role, _ in stalled_children.frozen] == ["actor", "learner"]


def test_frozen_learner_stops_the_run_naming_it_and_its_silence(stalled_children):
    error = stalled_children.error
    assert error.role == "learner" and error.exitcode == -signal.SIGKILL
    message = str(error)
    assert "learner stalled: no sign of life for" in message
    assert f"stall_timeout={STALL_TIMEOUT:g} s" in message


def test_frozen_learner_is_noticed_soon_after_the_stall_timeout(stalled_children):
    assert stalled_children.detected_after < STALL_TIMEOUT + 10


def test_frozen_children_are_killed_and_reaped(stalled_children):
    assert stalled_children.alive == []  # no stopped process, no zombie


# ------------------------------------------------- handing a pipe to the learner ------
def test_failing_to_hand_an_actors_pipe_to_the_learner_raises_instead_of_hanging(
    manager_config, monkeypatch
):
    """Handing the learner an actor's pipe goes through multiprocessing's resource
    sharer (a socket in a temp folder); if that fails the run must say so, not go on
    with an actor nobody reads (it hung until its time limit)."""
    import multiprocessing.resource_sharer

    def no_sharer(fd):
        raise OSError(f"resource sharer unavailable for fd {fd}")

    monkeypatch.setattr(multiprocessing.resource_sharer, "DupFd", no_sharer)
    manager = R2D2Manager(CARTPOLE, manager_config(**NO_TRAINING), actor_num=1, progress=False)
    started = time.monotonic()
    with pytest.raises(OSError, match="resource sharer unavailable"):
        manager.train(nb_steps=100, max_seconds=120)
    assert time.monotonic() - started < 60


# ------------------------------------------------------ a learner-update limit ------
_NB_TRAINS_SCRIPT = textwrap.dedent("""
    import functools
    import gymnasium as gym
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=8, seed=0)
        with R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config, actor_num=2,
                         progress=False) as manager:
            result = manager.train(nb_trains=40, max_seconds=120)
        print("RESULT", result.stop_reason, result.learner_updates, flush=True)

    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def nb_trains_run(tmp_path_factory):
    """A run of two actors that ends when the learner reaches 40 updates: the learner
    leaves first, while the actors may be writing to its experience pipes."""
    tmp_path = tmp_path_factory.mktemp("nb_trains")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    return run_script(_NB_TRAINS_SCRIPT, tmp_path, env)


def test_run_stops_for_nb_trains(nb_trains_run):
    assert nb_trains_run.exitcode == 0, nb_trains_run.stderr[-3000:]
    result = next(line for line in nb_trains_run.stdout.splitlines() if line.startswith("RESULT"))
    _, reason, updates = result.split()
    assert reason == "nb_trains" and int(updates) >= 40


def test_actors_stop_quietly_when_the_learner_ends_the_run(nb_trains_run):
    assert "Traceback" not in nb_trains_run.stderr, nb_trains_run.stderr[-3000:]
    assert "ERROR" not in nb_trains_run.stderr, nb_trains_run.stderr[-3000:]


# ------------------------------------------------------- start-up and orphans ------
_UNGUARDED_SCRIPT = textwrap.dedent("""
    import functools
    import gymnasium as gym
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                        burnin=2, input_length=4, multisteps=2, batch_size=4,
                        memory_capacity=200, memory_warmup=200, seed=0)
    manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config, actor_num=1,
                          progress=False)
    manager.train(max_seconds=60)  # no `if __name__ == "__main__":` guard
""")


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory):
    """A script that starts a run without the `__main__` guard."""
    tmp_path = tmp_path_factory.mktemp("unguarded")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    return run_script(_UNGUARDED_SCRIPT, tmp_path, env)


def test_script_without_the_main_guard_gets_an_error_saying_to_add_it(unguarded):
    assert unguarded.exitcode == 1
    last = unguarded.stderr.strip().splitlines()[-1]
    assert last.startswith("r2d2_agent.distributed.reports.R2D2ProcessError: the learner")
    assert 'if __name__ == "__main__":' in last and "add that guard" in last


_ORPHAN_SCRIPT = textwrap.dedent("""
    import functools, json, os, signal
    import gymnasium as gym
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=200, seed=0)
        manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config,
                              actor_num=1, progress=False)

        def on_progress(p):
            if p.weights_version >= 1 and min(p.actor_env_steps) > 0:
                print("PIDS " + json.dumps([*p.actor_pids, p.learner_pid]), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # the manager dies, its children live

        manager.train(max_seconds=120, on_progress=on_progress)

    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def orphans(tmp_path_factory):
    """A run whose manager is SIGKILLed: its children are left to notice it alone (the
    script's output ends once they exited: they hold its stderr).

    The run has a temp folder of its own (short: the manager's socket goes in it): a
    manager started meanwhile by another test worker reclaims dead runs' folders in the
    machine's temp folder, this one's too."""
    tmp_path = tmp_path_factory.mktemp("orphans")
    temp_dir = tempfile.mkdtemp(prefix="r2d2-orphans-")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TMPDIR": temp_dir}
    try:
        run = run_script(_ORPHAN_SCRIPT, tmp_path, env)
        line = next(line for line in run.stdout.splitlines() if line.startswith("PIDS "))
        run.children = json.loads(line[len("PIDS ") :])
        run.temp_dir = temp_dir
        yield run
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie nobody reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_children_of_a_dead_manager_exit_on_their_own(orphans):
    assert orphans.exitcode == -signal.SIGKILL
    assert [pid for pid in orphans.children if _running(pid)] == []


def test_a_dead_managers_multiprocessing_folder_names_it_and_the_next_run_can_reclaim_it(
    orphans,
):
    folders = [x for x in find_mp_folders(orphans.temp_dir) if x.pid == orphans.pid]
    assert [x.owner for x in folders] == ["dead"]  # not an anonymous pymp-<random>
    reclaim_mp_folders(orphans.temp_dir)
    assert not os.path.exists(folders[0].path)


def test_children_of_a_dead_manager_log_one_line_each_not_a_traceback(orphans):
    assert "Traceback" not in orphans.stderr, orphans.stderr[-3000:]
    gone = f"the manager process (pid {orphans.pid}) is gone; this process stops"
    assert orphans.stderr.count(gone) == len(orphans.children), orphans.stderr[-3000:]


# ----------------------------------------------------------------- Ctrl-C ----------
_SIGINT_SCRIPT = textwrap.dedent("""
    import functools, json, multiprocessing, sys
    import gymnasium as gym
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=200, seed=0)
        manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config,
                              actor_num=2, progress=False)
        ready = {}

        def on_progress(p):
            if not ready and p.weights_version >= 1 and min(p.actor_env_steps) > 0:
                ready.update(tf="tensorflow" in sys.modules,
                             pids=[*p.actor_pids, p.learner_pid])
                print("READY " + json.dumps(ready), flush=True)

        result = manager.train(max_seconds=120, on_progress=on_progress)
        print("RESULT " + json.dumps({
            "reason": result.stop_reason, "version": result.weights_version,
            "weights": manager.latest_weights() is not None, "steps": result.env_steps,
            "tf": "tensorflow" in sys.modules,
            "children": len(multiprocessing.active_children())}), flush=True)

    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def ctrl_c(tmp_path_factory, shm_segments):
    """A two-actor run in a script of its own, interrupted like a terminal's Ctrl-C (SIGINT
    to the whole process group) once both actors stepped and weights were published.

    Gives what the script reported when ready and at the end, its exit code and stderr, and
    what is left once it exited: live child pids, its shared-memory segments.
    """
    tmp_path = tmp_path_factory.mktemp("ctrl_c")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    run = interrupt_script(_SIGINT_SCRIPT, tmp_path, env)
    run.live_children = [pid for pid in run.ready["pids"] if os.path.exists(f"/proc/{pid}")]
    run.segments = shm_segments(run.pid)
    return run


def test_ctrl_c_stops_the_run_as_interrupted(ctrl_c):
    assert ctrl_c.result["reason"] == "interrupted" and ctrl_c.result["steps"] > 0


def test_ctrl_c_lets_the_script_exit_normally(ctrl_c):
    assert ctrl_c.exitcode == 0


def test_ctrl_c_keeps_the_latest_weights(ctrl_c):
    assert ctrl_c.result["weights"] is True and ctrl_c.result["version"] >= 1


def test_manager_never_loads_tensorflow_in_the_parent(ctrl_c):
    assert ctrl_c.ready["tf"] is False and ctrl_c.result["tf"] is False


def test_ctrl_c_leaves_no_child_process(ctrl_c):
    assert ctrl_c.result["children"] == 0
    assert ctrl_c.live_children == [], "a child process is still alive"


def test_ctrl_c_leaves_no_shared_memory_segment(ctrl_c):
    assert ctrl_c.segments == []


def test_ctrl_c_prints_no_traceback(ctrl_c):
    assert "Traceback" not in ctrl_c.stderr


# ----------------------------------------------------------------- SIGTERM ---------
_SIGTERM_SCRIPT = textwrap.dedent("""
    import functools, json, multiprocessing, os, signal, sys
    import gymnasium as gym
    import time
    from r2d2_agent.callbacks import CheckpointCallback
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    class SlowFinalSave:  # a final checkpoint longer than shutdown and stall timeouts
        def on_r2d2_learner_end(self, learner):
            time.sleep(5.0)

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=200, seed=0)
        checkpoints = CheckpointCallback("ckpt", interval=10**9, save_at_end=True)
        manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config,
                              actor_num=2, callbacks=[SlowFinalSave(), checkpoints],
                              shutdown_timeout=1.0, stall_timeout=3.0, progress=False)
        ready = {}

        def on_progress(p):
            if not ready and p.weights_version >= 1 and min(p.actor_env_steps) > 0:
                ready.update(pids=[*p.actor_pids, p.learner_pid])
                print("READY " + json.dumps(ready), flush=True)

        result = manager.train(max_seconds=120, on_progress=on_progress)
        print("RESULT " + json.dumps({
            "reason": result.stop_reason, "detail": result.stop_detail,
            "interrupted": result.interrupted, "steps": result.env_steps,
            "updates": result.learner_updates,
            "weights": manager.latest_weights() is not None,
            "checkpoints": sorted(os.listdir("ckpt")) if os.path.isdir("ckpt") else [],
            "handler_restored": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "tf": "tensorflow" in sys.modules,
            "children": len(multiprocessing.active_children())}), flush=True)

    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def sigterm(tmp_path_factory, shm_segments):
    """A two-actor run with a `CheckpointCallback` (saves only at the end, after a hook
    that takes longer than `shutdown_timeout` and `stall_timeout`: long legitimate work)
    in a script of its own, sent SIGTERM to its whole process group (as `docker stop`,
    systemd or Slurm do) once both actors stepped and weights were published."""
    tmp_path = tmp_path_factory.mktemp("sigterm")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    run = interrupt_script(_SIGTERM_SCRIPT, tmp_path, env, sig=signal.SIGTERM)
    run.live_children = [pid for pid in run.ready["pids"] if os.path.exists(f"/proc/{pid}")]
    run.segments = shm_segments(run.pid)
    run.folder = tmp_path
    return run


def test_sigterm_stops_the_run_with_its_own_stop_reason(sigterm):
    result = sigterm.result
    assert result["reason"] == "sigterm" and result["interrupted"] is True
    assert "SIGTERM" in result["detail"] and result["steps"] > 0


def test_sigterm_lets_the_learner_write_its_final_checkpoint(sigterm):
    from r2d2_agent.checkpoints import read_checkpoint

    files = sigterm.result["checkpoints"]
    assert len(files) == 1 and files[0].endswith(".h5")  # the save at the end only
    state = read_checkpoint(sigterm.folder / "ckpt" / files[0])
    assert state.counters.learner_updates == sigterm.result["updates"]
    assert 0 < state.counters.env_steps <= sigterm.result["steps"]


def test_sigterm_lets_the_script_exit_normally_and_keeps_the_weights(sigterm):
    assert sigterm.exitcode == 0 and sigterm.result["weights"] is True


def test_sigterm_handler_is_restored_when_train_returns(sigterm):
    assert sigterm.result["handler_restored"] is True


def test_sigterm_leaves_no_child_process_and_no_segment(sigterm):
    assert sigterm.result["children"] == 0 and sigterm.live_children == []
    assert sigterm.segments == []


def test_sigterm_prints_no_traceback(sigterm):
    assert "Traceback" not in sigterm.stderr, sigterm.stderr[-3000:]


def test_stop_signals_turn_sighup_into_a_call_and_restore_the_handler():
    got: list = []
    before = signal.getsignal(signal.SIGHUP)
    with stop_signals(got.append):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)  # Python runs the handler between two bytecodes
    assert got == [signal.SIGHUP]
    assert signal.getsignal(signal.SIGHUP) == before


def test_stop_signals_install_nothing_outside_the_main_thread():
    import threading

    before = signal.getsignal(signal.SIGTERM)
    seen: list = []

    def body():
        with stop_signals(print):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


# ----------------------------------------------------------------- learning --------
@pytest.mark.slow
def test_cartpole_is_solved_with_two_actors():
    """The protocol of tests/test_learning.py: 10 greedy episodes every 2,500 env steps
    (here: all actors together), solved at the first mean >= 475, 80,000 env steps.

    Several processes make the run timing-dependent (not bit-reproducible like the
    single-process tests), so the budget leaves room: in our runs it solved after about
    20,000 env steps, and once was still short of 475 at 40,000."""
    from r2d2_agent.presets import cartpole_config

    manager = R2D2Manager(CARTPOLE, cartpole_config(seed=1), actor_num=2, progress=False)
    eval_env, evals, next_eval = gym.make("CartPole-v1"), [], [2_500]

    def on_progress(p):
        if p.env_steps >= next_eval[0]:
            next_eval[0] += 2_500
            returns = manager.evaluate(10, env=eval_env, seed=None if evals else 1_000)
            evals.append((p.env_steps, float(np.mean(returns))))
            if evals[-1][1] >= 475:
                manager.request_stop()

    result = manager.train(nb_steps=80_000, max_seconds=900, on_progress=on_progress)
    eval_env.close()
    assert result.stop_reason == "requested", evals
    assert "tensorflow" in sys.modules  # (pytest's conftest imports it; the manager did not)
    agent = manager.create_test_agent()
    assert agent.compute_q_values(np.zeros(4, np.float32)).shape == (2,)
