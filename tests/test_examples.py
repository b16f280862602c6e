"""Every example runs end to end, as a user runs it, with a tiny budget (slow: each starts
a manager with its processes, about half a minute to a minute apiece)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run_example(script: str, *args: str, cwd: pathlib.Path, timeout: float = 600) -> str:
    """Runs `examples/<script>` in `cwd`; returns its stdout, failing with its stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


TINY_ATARI = (
    *("--env", "ALE/Breakout-v5", "--life-loss"),  # a life lost ends an episode: ~50 steps
    *("--memory-capacity", "32", "--eval-episodes", "1", "--keep-checkpoints", "1"),
    *("--run-dir", "run"),
)
"""`examples/atari.py`'s arguments for a run of a few hundred env steps."""


def test_the_atari_example_runs_on_a_real_rom(tmp_path):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    # 32 envs per actor (the default)
    out = run_example("atari.py", *TINY_ATARI, "--nb-steps", "1600", cwd=tmp_path)
    assert "stopped by nb_steps: 1600 env steps" in out
    assert "greedy evaluation:" in out
    assert any((tmp_path / "run" / "checkpoints").glob("*.h5"))
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 0


def test_the_atari_example_runs_on_envpool(tmp_path):
    pytest.importorskip("envpool")
    out = run_example(  # 8 envs of one actor in one envpool batch
        "atari.py",
        *TINY_ATARI,
        *("--envpool", "--envs-per-actor", "8", "--nb-steps", "800"),
        cwd=tmp_path,
    )
    assert "stopped by nb_steps: 800 env steps" in out
    assert "greedy evaluation:" in out
    assert "--envpool" in out.splitlines()[-1]


def test_the_custom_image_model_example_runs(tmp_path):
    out = run_example(
        "custom_image_model.py", "--nb-steps", "300", "--eval-episodes", "2", cwd=tmp_path
    )
    assert "stopped by nb_steps: 300 env steps" in out
    assert "greedy mean return over 2 games:" in out


def test_the_single_process_cartpole_example_runs(tmp_path):
    out = run_example(
        "cartpole_single.py", "--nb-steps", "300", "--eval-episodes", "2", cwd=tmp_path
    )
    assert "greedy evaluation over 2 episodes:" in out


def test_the_cartpole_example_trains_with_the_manager(tmp_path):
    out = run_example(
        "cartpole.py",
        "--actors",
        "1",
        "--nb-steps",
        "4000",
        "--eval-episodes",
        "2",
        "--eval-interval",
        "0",
        "--run-dir",
        "run",
        cwd=tmp_path,
    )
    assert "stopped by nb_steps: 4000 env steps" in out
    assert "greedy evaluation over 2 episodes:" in out
    assert any((tmp_path / "run" / "checkpoints").glob("*.h5"))
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 0


def test_the_cartpole_example_stops_once_an_evaluation_reaches_the_stop_return(tmp_path):
    out = run_example(
        "cartpole.py",
        "--actors",
        "1",
        "--nb-steps",
        "20000",
        "--eval-episodes",
        "1",
        "--eval-interval",
        "500",
        "--stop-return",
        "-1",  # any CartPole return reaches it: the first evaluation stops the run
        "--run-dir",
        "run",
        cwd=tmp_path,
    )
    assert "greedy mean" in out and "reached the stop return -1.0: stopping" in out
    assert "stopped by requested:" in out
    evaluations = (tmp_path / "run" / "eval.jsonl").read_text().splitlines()
    assert len(evaluations) == 2  # the one that stopped the run, and the final one
    assert "best weights: run/best_weights.h5" in out
    assert (tmp_path / "run" / "best_weights.h5").stat().st_size > 0


def test_the_cartpole_example_trains_on_ray(tmp_path):
    pytest.importorskip("ray")
    out = run_example(
        "cartpole.py",
        "--backend",
        "ray",
        "--actors",
        "1",
        "--nb-steps",
        "1000",
        "--eval-episodes",
        "1",
        "--run-dir",
        "run",
        cwd=tmp_path,
    )
    assert "stopped by nb_steps: 10" in out  # the budget, passed by a few steps at most
    assert "greedy evaluation over 1 episodes:" in out
    assert any((tmp_path / "run" / "checkpoints").glob("*.h5"))  # relative to the caller


def test_the_cartpole_example_takes_the_masked_task(tmp_path):
    out = run_example(
        "cartpole.py", "--masked", "--actors", "1", "--nb-steps", "1000", cwd=tmp_path
    )
    assert "run directory: runs/MaskedCartPole__r2d2__0__" in out
    assert "continue with: python examples/cartpole.py --masked --resume" in out


def test_the_cartpole_example_refuses_continuous_actions(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "cartpole.py"), "--env", "Pendulum-v1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Pendulum-v1 has actions Box" in proc.stderr
