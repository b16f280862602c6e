"""Tests of `R2D2Manager`: real actor and learner processes (spawn), faults, shutdown.

Each run starts a TensorFlow learner process (about 3-5 s on a small machine), so the runs
are few and tiny. Runs that do not need learning keep the learner in its warm-up (replay
never fills), so it never traces its training graph. Every test checks that no child
process and no shared-memory segment is left behind.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.distributed import R2D2Manager, R2D2ProcessError, TrainResult, describe_exit

CARTPOLE = functools.partial(gym.make, "CartPole-v1")


def tiny_config(**overrides) -> R2D2Config:
    base = dict(
        input_shape=(4,),
        nb_actions=2,
        lstm_units=16,
        dense_units=16,
        burnin=2,
        input_length=4,
        multisteps=2,
        batch_size=4,
        memory_capacity=200,
        actor_sync_interval=50,
        seed=0,
    )
    return R2D2Config(**{**base, **overrides})


NO_TRAINING = dict(memory_warmup=200)  # replay never fills: the learner only receives


def my_segments(pid: int | None = None) -> list[str]:
    prefix = f"r2d2_{os.getpid() if pid is None else pid}_"
    return (
        [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        if os.path.isdir("/dev/shm")
        else []
    )


@pytest.fixture(autouse=True)
def _nothing_left_behind():
    yield
    assert multiprocessing.active_children() == []
    assert my_segments() == []


# Callbacks pickled into the children (module level, duck-typed: no TensorFlow import).
class FailingActorCallback:
    def __init__(self, index: int) -> None:
        self.index = index

    def on_r2d2_actor_begin(self, actor_index, runner):
        if actor_index == self.index:
            raise ValueError(f"boom in actor {actor_index}")


class FailingLearnerCallback:
    def on_r2d2_learner_begin(self, learner):
        raise ValueError("boom in the learner")


class ParentHooks:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_r2d2_train_begin(self):
        self.calls.append("begin")

    def on_r2d2_train_end(self):
        self.calls.append("end")


def _pendulum():
    return gym.make("Pendulum-v1")


# ----------------------------------------------------------------- bad inputs ------
def test_bad_inputs_raise_in_the_parent_before_any_child():
    config = tiny_config()
    with pytest.raises(TypeError, match="env_factory must be picklable"):
        R2D2Manager(lambda: gym.make("CartPole-v1"), config)
    with pytest.raises(ValueError, match="continuous action space"):
        R2D2Manager(_pendulum, config.replace(input_shape=(3,)))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="actor_num"):
            R2D2Manager(CARTPOLE, config, actor_num=bad)
    with pytest.raises(
        ValueError,
        match=r"observation shape \(4,\) does not match "
        r"config.input_shape \(5,\)",
    ):
        R2D2Manager(CARTPOLE, config.replace(input_shape=(5,)))
    with pytest.raises(ValueError, match="the env has 2 actions but config.nb_actions is 3"):
        R2D2Manager(CARTPOLE, config.replace(nb_actions=3))
    with pytest.raises(TypeError, match="R2D2Config"):
        R2D2Manager(CARTPOLE, {"input_shape": (4,)})
    with pytest.raises(ValueError, match="use_numpy_policy"):
        R2D2Manager(
            CARTPOLE,
            config.replace(input_shape=(4, 1, 1), input_type=InputType.COLOR),
            use_numpy_policy=True,
        )
    manager = R2D2Manager(CARTPOLE, config)
    with pytest.raises(ValueError, match="at least one limit"):
        manager.train()
    with pytest.raises(ValueError, match="nb_steps"):
        manager.train(nb_steps=0)
    with pytest.raises(RuntimeError, match="call train"):
        manager.create_test_agent()
    assert multiprocessing.active_children() == []


# ----------------------------------------------------------------- a real run ------
def test_two_actors_run_to_nb_steps_and_hand_over_weights():
    hooks = ParentHooks()
    config = tiny_config()
    manager = R2D2Manager(
        CARTPOLE, config, actor_num=2, callbacks=[hooks], progress=False, publish_interval=5
    )
    seen: list = []
    with manager:
        result = manager.train(nb_steps=800, max_seconds=150, on_progress=seen.append)
    assert isinstance(result, TrainResult) and result.stop_reason == "nb_steps"
    assert hooks.calls == ["begin", "end"]
    assert 800 <= result.env_steps <= 801  # at most actor_num - 1 steps past the budget
    assert sum(result.actor_env_steps) == result.env_steps
    assert all(steps > 0 for steps in result.actor_env_steps)
    assert all(isinstance(n, int) for n in (result.env_steps, result.learner_updates))
    assert result.learner_updates > 0 and result.weights_version >= 1
    assert result.sequences_received > 0 and result.actor_restarts == [0, 0]
    assert len(result.episode_returns) == 2 and all(result.episode_returns)
    assert result.recent_mean_return() > 0
    for info in result.actor_info:  # the numpy policy never loads TensorFlow
        assert info["policy"] == "NumpyNetwork" and info["tensorflow_loaded"] is False
        assert info["weight_pulls"] >= 2
    assert seen and seen[-1].env_steps <= result.env_steps
    # the rate limiter kept updates near env steps / train_interval (+ tolerance)
    assert result.learner_updates <= result.env_steps / config.train_interval + 16 + 1

    weights = manager.latest_weights()
    agent = manager.create_test_agent()
    for got, want in zip(agent.learner.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(got, want)
    assert agent.compute_q_values(np.zeros(4, np.float32)).shape == (2,)


def test_request_stop_from_the_progress_hook():
    manager = R2D2Manager(CARTPOLE, tiny_config(**NO_TRAINING), actor_num=1, progress=False)

    def on_progress(p):
        if p.env_steps >= 100:
            manager.request_stop()

    result = manager.train(max_seconds=120, on_progress=on_progress)
    assert result.stop_reason == "requested" and result.env_steps >= 100
    returns = manager.evaluate(2, seed=0)  # greedy, in this process, latest weights
    assert len(returns) == 2 and all(r > 0 for r in returns)


# ----------------------------------------------------------------- faults ----------
def test_describe_exit():
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(1) == "exit code 1"
    assert describe_exit(None) == "still running"


def test_killed_actor_is_restarted_then_the_run_stops_with_a_clear_error():
    config = tiny_config(**NO_TRAINING)
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
    detected = time.monotonic() - state["kills"][-1][1]
    err = info.value
    assert len(state["kills"]) == 2
    assert err.role == "actor" and err.index == 0 and err.exitcode == -signal.SIGKILL
    assert "killed by SIGKILL" in str(err) and "max_actor_restarts=1" in str(err)
    assert detected < 5.0
    assert manager.latest_weights() is not None  # kept from the shared segment


def test_actor_exception_is_restarted_then_reported_with_its_traceback():
    manager = R2D2Manager(
        CARTPOLE,
        tiny_config(**NO_TRAINING),
        actor_num=1,
        callbacks=[FailingActorCallback(index=0)],
        max_actor_restarts=1,
        progress=False,
    )
    with pytest.raises(R2D2ProcessError) as info:
        manager.train(max_seconds=120)
    message = str(info.value)
    assert info.value.role == "actor" and info.value.index == 0
    assert info.value.exitcode == 1 and "(exit code 1)" in message
    assert "already restarted 1 time(s)" in message
    assert "Traceback (most recent call last)" in message
    assert "ValueError: boom in actor 0" in message
    assert "on_r2d2_actor_begin" in info.value.child_traceback


def test_learner_exception_stops_the_run_and_is_reraised_with_its_traceback():
    manager = R2D2Manager(
        CARTPOLE,
        tiny_config(**NO_TRAINING),
        actor_num=1,
        callbacks=[FailingLearnerCallback()],
        progress=False,
    )
    t0 = time.monotonic()
    with pytest.raises(R2D2ProcessError, match="learner failed") as info:
        manager.train(max_seconds=120)
    assert time.monotonic() - t0 < 60
    assert info.value.role == "learner" and info.value.exitcode == 1
    assert "ValueError: boom in the learner" in str(info.value)
    assert "Traceback (most recent call last)" in str(info.value)


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


def test_ctrl_c_stops_gracefully_keeps_weights_and_never_loads_tf_in_the_parent(tmp_path):
    script = tmp_path / "run_manager.py"
    script.write_text(_SIGINT_SCRIPT)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def expect(prefix: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return json.loads(line[len(prefix) :])
        proc.kill()
        raise AssertionError(
            f"no {prefix!r} line; stderr:\n{(tmp_path / 'stderr.txt').read_text()[-3000:]}"
        )

    try:
        ready = expect("READY ", 120)
        os.killpg(proc.pid, signal.SIGINT)  # like a terminal's Ctrl-C: the whole group
        result = expect("RESULT ", 60)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ready["tf"] is False and result["tf"] is False  # no TensorFlow in the parent
    assert result["reason"] == "interrupted" and result["steps"] > 0
    assert result["weights"] is True and result["version"] >= 1
    assert result["children"] == 0
    for pid in ready["pids"]:
        assert not os.path.exists(f"/proc/{pid}"), f"child {pid} is still alive"
    assert my_segments(proc.pid) == []
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


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
