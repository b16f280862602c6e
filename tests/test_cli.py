"""`r2d2-train`: one command to train any Gymnasium env.

The checks of the arguments run in this process and start nothing (`plan_run`, or `main`
ending with exit status 2 before any child). One tiny run and its resume share a
module-scoped fixture; the learning test (slow) trains CartPole to the env's reward
threshold, as `r2d2-train CartPole-v1 --preset cartpole --actors 2` does.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import tomllib

from r2d2_agent import InputType, R2D2Agent
from r2d2_agent.checkpoints import (
    TrainingCounters,
    TrainingState,
    checkpoint_name,
    read_checkpoint,
    write_checkpoint,
)
from r2d2_agent.cli import (
    BEST_FILE,
    RESULT_FILE,
    UsageError,
    _describe,
    _Evaluations,
    build_parser,
    main,
    plan_run,
)
from r2d2_agent.presets import cartpole_config, memory_config
from r2d2_agent.runlog import read_run

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _plan(*argv):
    return plan_run(build_parser().parse_args(list(argv)))


def _refused(capsys, *argv) -> str:
    """`main(argv)`'s error message; it must exit with status 2 and start no process."""
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    assert raised.value.code == 2
    assert multiprocessing.active_children() == []
    return capsys.readouterr().err


# ----------------------------------------------------------------- the configuration --
def test_a_preset_on_its_env_is_the_preset_itself():
    assert _plan("CartPole-v1", "--preset", "cartpole").config == cartpole_config(seed=0)


def test_the_env_decides_the_spaces_over_the_preset():
    config = _plan("Acrobot-v1", "--preset", "cartpole").config
    assert (config.input_shape, config.nb_actions) == ((6,), 3)
    assert config.lstm_units == cartpole_config().lstm_units


def test_a_preset_that_takes_the_task_is_given_the_envs_spaces():
    config = _plan("Acrobot-v1", "--preset", "memory").config
    assert config == memory_config(input_shape=(6,), nb_actions=3, seed=0)


def test_memory_span_sets_the_memory_presets_window():
    config = _plan("Acrobot-v1", "--preset", "memory", "--memory-span", "20").config
    assert config == memory_config(input_shape=(6,), nb_actions=3, memory_span=20, seed=0)
    assert (config.input_length, config.train_interval) == (64, 6)


def test_each_step_scored_sets_the_memory_presets_gamma_0():
    config = _plan("Acrobot-v1", "--preset", "memory", "--each-step-scored").config
    assert config == memory_config(input_shape=(6,), nb_actions=3, each_step_scored=True, seed=0)
    assert config.gamma == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--each-step-scored"], "--each-step-scored goes with --preset memory"),
        (["--preset", "cartpole", "--each-step-scored"], "not --preset cartpole"),
        (["--memory-span", "20"], "--memory-span goes with --preset memory"),
        (["--preset", "cartpole", "--memory-span", "20"], "not --preset cartpole"),
        (["--preset", "memory", "--memory-span", "-2"], "got -2"),
    ],
)
def test_preset_options_elsewhere_or_negative_are_a_usage_error(args, message):
    with pytest.raises(UsageError, match=message):
        _plan("Acrobot-v1", *args)


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_set_wins_over_the_config_file_which_wins_over_the_preset(tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    sep = " = " if suffix == ".toml" else ": "
    path.write_text(f"lstm_units{sep}32\nbatch_size{sep}16\n")
    config = _plan(
        "CartPole-v1", "--preset", "cartpole", "--config", str(path), "--set", "lstm_units=16"
    ).config
    assert (config.lstm_units, config.batch_size, config.dense_units) == (16, 16, 64)


def test_set_takes_python_literals_and_input_types_by_name():
    config = _plan(
        "CartPole-v1", "--set", "learning_rate=2e-3", "--set", "input_type=VALUES"
    ).config
    assert config.learning_rate == 2e-3 and config.input_type is InputType.VALUES


def test_an_ale_game_gets_the_atari_frames():
    pytest.importorskip("ale_py")
    plan = _plan("ALE/Pong-v5", "--set", "memory_capacity=1000")
    config = plan.config
    assert (config.input_shape, config.input_type, config.input_sequence) == (
        (84, 84),
        InputType.GRAY_2ch,
        4,
    )
    env = plan.env_factory()
    try:
        assert env.observation_space.shape == (84, 84)  # AtariPreprocessing
    finally:
        env.close()


def test_envpool_steps_each_actors_ale_games_and_the_evaluation_plays_make_atari():
    pytest.importorskip("ale_py")
    pytest.importorskip("envpool")
    from r2d2_agent.envs import EnvPoolAtari

    plan = _plan(
        "ALE/Pong-v5", "--envpool", "--life-loss", "--set", "envs_per_actor=8", "--dry-run"
    )
    assert plan.actor_env_factory == EnvPoolAtari("ALE/Pong-v5", 8, True)
    assert plan.env_factory.func.__name__ == "make_env"
    assert "ALE/Pong-v5 (envpool)" in _describe(plan)


def test_envpool_without_envpool_names_the_extra(capsys, monkeypatch):
    pytest.importorskip("ale_py")
    monkeypatch.setitem(sys.modules, "envpool", None)
    err = _refused(capsys, "ALE/Pong-v5", "--envpool", "--dry-run")
    assert "--envpool" in err and "r2d2-agent[envpool]" in err


def test_a_replay_nobody_sized_is_made_to_fit_in_half_the_memory():
    pytest.importorskip("ale_py")
    plan = _plan("ALE/Pong-v5")  # the paper's 100,000 sequences: 29.7 GB
    assert plan.config.memory_capacity < 100_000
    assert any("memory_capacity=" in note for note in plan.notes)


# ----------------------------------------------------------------- bad arguments ------
def test_envpool_is_refused_for_a_game_that_is_not_atari(capsys):
    err = _refused(capsys, "CartPole-v1", "--envpool", "--dry-run")
    assert "--envpool steps ALE games; CartPole-v1 is not one" in err


def test_an_unknown_field_is_named_with_the_closest_one(capsys):
    assert "did you mean lstm_units?" in _refused(capsys, "CartPole-v1", "--set", "lstm_unit=3")


def test_an_unknown_env_id_gets_gymnasiums_suggestion(capsys):
    assert "Did you mean: `CartPole`?" in _refused(capsys, "CartPol-v1")


def test_an_unknown_preset_lists_the_presets(capsys):
    assert "cartpole, masked_cartpole" in _refused(capsys, "CartPole-v1", "--preset", "pong")


def test_continuous_actions_are_refused(capsys):
    assert "Discrete" in _refused(capsys, "Pendulum-v1")


def test_an_invalid_config_value_is_refused_naming_the_field(capsys):
    assert "batch_size" in _refused(capsys, "CartPole-v1", "--set", "batch_size=0")


def test_a_missing_checkpoint_to_resume_is_refused(capsys, tmp_path):
    message = _refused(capsys, "CartPole-v1", "--resume", str(tmp_path / "nothing"))
    assert "does not exist" in message


def test_a_checkpoint_of_another_network_is_refused_naming_the_field(capsys, tmp_path, make_config):
    agent = R2D2Agent(make_config())  # lstm_units=8; the preset has 64
    agent.compile()
    agent.save_checkpoint(str(tmp_path / "ckpt-1.h5"))
    message = _refused(capsys, "CartPole-v1", "--preset", "cartpole", "--resume", str(tmp_path))
    assert "lstm_units" in message


def test_a_dry_run_prints_the_plan_and_trains_nothing(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert (
        main(["CartPole-v1", "--preset", "cartpole", "--dry-run", "--run-dir", str(run_dir)]) == 0
    )
    assert "lstm_units=64" in capsys.readouterr().out
    assert not run_dir.exists()


def test_the_package_installs_the_r2d2_train_command():
    with open(ROOT / "pyproject.toml", "rb") as file:
        target = tomllib.load(file)["project"]["scripts"]["r2d2-train"]
    module, function = target.split(":")
    assert getattr(importlib.import_module(module), function) is main


# ----------------------------------------------------------------- the best weights -----
class _ScoresTheWeights:
    """A manager whose greedy evaluation returns the first weight: weights of value v
    evaluate to a mean return of v."""

    def __init__(self):
        self.stopped = False
        self.published = None

    def evaluate(self, nb_episodes, env, weights):
        return [float(weights[0][0])] * nb_episodes

    def latest_weights(self):
        return self.published

    def request_stop(self):
        self.stopped = True


def _weights(value):
    return [np.full((3,), value, np.float32), np.full((2, 2), -value, np.float32)]


def _evaluations(run_dir, stop_return=None):
    """`_Evaluations` of a run directory holding one checkpoint (optimizer state 7)."""
    os.makedirs(run_dir / "checkpoints", exist_ok=True)
    weights = _weights(0.0)
    state = TrainingState(weights, weights, [np.array(7)], ("a", "b"), ("iteration",),
                          TrainingCounters(env_steps=900), {"gamma": 0.99}, "0.1")  # fmt: skip
    write_checkpoint(run_dir / "checkpoints" / checkpoint_name(3), state)
    plan = SimpleNamespace(run_dir=str(run_dir), eval_interval=100, eval_episodes=2,
                           env_factory=lambda: SimpleNamespace(close=lambda: None),
                           stop_return=stop_return)  # fmt: skip
    run_log = SimpleNamespace(log_evaluation=lambda env_steps, returns: None)
    return _Evaluations(plan, _ScoresTheWeights(), run_log)


def _progress(evaluations, env_steps, value):
    evaluations.manager.published = _weights(value)
    evaluations(SimpleNamespace(env_steps=env_steps))


def test_the_best_evaluations_weights_are_written_not_the_last(tmp_path):
    evaluations = _evaluations(tmp_path)
    for env_steps, value in ((100, 1.0), (200, 3.0), (300, 2.0), (400, 3.0)):
        _progress(evaluations, env_steps, value)
    path = evaluations.write_best()
    assert path == str(tmp_path / BEST_FILE)
    assert evaluations.best == {"env_steps": 200, "mean_return": 3.0}  # ties keep the first
    best = read_checkpoint(path)
    for array, expected in zip(best.online_weights, _weights(3.0), strict=True):
        np.testing.assert_array_equal(array, expected)
    for array, expected in zip(best.target_weights, _weights(3.0), strict=True):
        np.testing.assert_array_equal(array, expected)
    assert best.counters.env_steps == 900 and int(best.optimizer_weights[0]) == 7


def test_weights_published_after_an_evaluation_do_not_change_the_kept_ones(tmp_path):
    evaluations = _evaluations(tmp_path)
    _progress(evaluations, 100, 5.0)
    evaluations.manager.published[0][:] = 0.0  # the live arrays move on
    best = read_checkpoint(evaluations.write_best())
    np.testing.assert_array_equal(best.online_weights[0], np.full((3,), 5.0))


def test_no_evaluation_writes_no_best_weights(tmp_path):
    evaluations = _evaluations(tmp_path)
    _progress(evaluations, 50, 5.0)  # before the first interval
    assert evaluations.write_best() is None
    assert not (tmp_path / BEST_FILE).exists()


def _resumed(tmp_path, earlier_best):
    """A run that wrote best_weights.h5 (value `earlier_best`) and result.json, then a resumed
    run's `_Evaluations` in the same directory."""
    first = _evaluations(tmp_path)
    _progress(first, 100, earlier_best)
    first.write_best()
    result = {"best_evaluation": first.best}
    (tmp_path / RESULT_FILE).write_text(json.dumps(result))
    return _evaluations(tmp_path)


def test_a_resumed_run_keeps_the_earlier_best_weights_unless_it_beats_them(tmp_path):
    resumed = _resumed(tmp_path, earlier_best=4.0)
    _progress(resumed, 100, 3.0)
    assert resumed.write_best() == str(tmp_path / BEST_FILE)
    assert resumed.best == {"env_steps": 100, "mean_return": 4.0}
    kept = read_checkpoint(tmp_path / BEST_FILE)
    np.testing.assert_array_equal(kept.online_weights[0], np.full((3,), 4.0))
    _progress(resumed, 200, 6.0)
    resumed.write_best()
    beaten = read_checkpoint(tmp_path / BEST_FILE)
    np.testing.assert_array_equal(beaten.online_weights[0], np.full((3,), 6.0))


def test_a_resumed_run_without_the_best_file_starts_its_best_afresh(tmp_path):
    _resumed(tmp_path, earlier_best=4.0)
    os.remove(tmp_path / BEST_FILE)
    resumed = _evaluations(tmp_path)
    _progress(resumed, 100, 3.0)
    assert resumed.best["mean_return"] == 3.0
    assert read_checkpoint(resumed.write_best()).online_weights[0][0] == 3.0


def test_an_evaluation_at_the_stop_return_stops_the_run(tmp_path):
    evaluations = _evaluations(tmp_path, stop_return=2.5)
    _progress(evaluations, 100, 2.0)
    assert not evaluations.manager.stopped
    _progress(evaluations, 200, 2.5)
    assert evaluations.manager.stopped


# ----------------------------------------------------------------- a run and its resume --
TINY = ["--actors", "1", "--checkpoint-interval", "5", "--eval-interval", "0"]
TINY += ["--eval-episodes", "2", "-q", "--set", "memory_warmup=8", "--set", "batch_size=8"]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, assert_no_leftovers):
    """`r2d2-train CartPole-v1 --preset cartpole` for 400 env steps, then `--resume` of its
    run directory to 800."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    first_code = main(["CartPole-v1", "--preset", "cartpole", *TINY, "--nb-steps", "400",
                       "--run-dir", str(run_dir)])  # fmt: skip
    first = json.loads((run_dir / "result.json").read_text())
    first_log = read_run(run_dir)
    second_code = main(["CartPole-v1", "--preset", "cartpole", *TINY, "--nb-steps", "800",
                        "--resume", str(run_dir)])  # fmt: skip
    assert_no_leftovers()
    return SimpleNamespace(
        codes=(first_code, second_code),
        first=first,
        first_log=first_log,
        second=json.loads((run_dir / "result.json").read_text()),
        second_log=read_run(run_dir),
        run_dir=run_dir,
    )


def test_a_run_ends_with_its_result_and_a_final_evaluation(resumed):
    assert resumed.codes == (0, 0)
    assert resumed.first["stop_reason"] == "nb_steps" and resumed.first["env_steps"] >= 400
    assert len(resumed.first_log.evaluations) == 1 and resumed.first["final_evaluation"]


def test_a_run_directory_holds_logs_checkpoints_curve_and_tensorboard(resumed):
    names = set(os.listdir(resumed.run_dir))
    assert {"run.json", "learner.jsonl", "actor-0.jsonl", "learning_curve.png"} <= names
    assert os.listdir(resumed.run_dir / "checkpoints")
    assert os.listdir(resumed.run_dir / "tensorboard" / "actor_0")


def test_resume_continues_from_the_run_directorys_checkpoint(resumed):
    second = resumed.second
    assert second["resumed_from"].startswith(str(resumed.run_dir / "checkpoints"))
    assert second["env_steps"] >= 800 and second["episodes"] > resumed.first["episodes"]


def test_each_run_keeps_the_best_evaluations_weights_in_the_run_directory(resumed):
    first, second = resumed.first, resumed.second
    assert first["best_weights"] == second["best_weights"] == str(resumed.run_dir / BEST_FILE)
    evaluated = [first["final_evaluation"], second["final_evaluation"]]
    assert second["best_evaluation"] == max(evaluated, key=lambda r: r["mean_return"])
    best = read_checkpoint(resumed.run_dir / BEST_FILE)
    last = read_checkpoint(resumed.run_dir / "checkpoints")
    assert best.config == last.config and best.replay is None
    assert [w.shape for w in best.online_weights] == [w.shape for w in last.online_weights]


def test_resume_appends_to_the_same_logs(resumed):
    first, second = resumed.first_log.actors[0], resumed.second_log.actors[0]
    assert second[: len(first)] == first and len(second) > len(first)


# ----------------------------------------------------------------- learning -------------
@pytest.mark.slow
def test_r2d2_train_solves_cartpole_to_the_envs_reward_threshold(tmp_path):
    code = main(["CartPole-v1", "--preset", "cartpole", "--actors", "2", "--seed", "0",
                 "--nb-steps", "60000", "--max-seconds", "600", "-q",
                 "--run-dir", str(tmp_path / "run")])  # fmt: skip
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert code == 0
    assert result["stop_return"] == 475.0 and result["reached_stop_return"], result
