"""benchmarks/memory_suite.py's bookkeeping (no training): the curve's summary, agent specs,
the table, and bad input named before any run starts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from script_loading import ROOT, load_script

PATH = ROOT / "benchmarks" / "memory_suite.py"


@pytest.fixture(scope="module")
def suite():
    return load_script("benchmarks/memory_suite.py", "memory_suite")


def test_the_curve_summary_normalises_and_finds_when_it_stays_solved(suite):
    # CartPole's range 0-500: 475 -> 0.9, 250 -> 0, 500 -> 1.
    summary = suite.summarise_curve([(5000, 250.0), (10000, 475.0), (15000, 500.0)], (0, 500), 0.9)
    assert summary["best"] == 1.0 and summary["final"] == 1.0
    assert summary["solved_at"] == 10000 and summary["stays_solved"] is True
    assert summary["curve"][0] == [5000, 250.0, 0.0]
    dips = suite.summarise_curve([(1, 1.0), (2, 0.5), (3, 0.95)], (-1, 1), 0.9)
    assert dips["solved_at"] == 1 and dips["stays_solved"] is False and dips["final"] == 0.95
    never = suite.summarise_curve([(1, -0.5)], (-1, 1), 0.9)
    assert never["solved_at"] is None and never["stays_solved"] is False
    timed = suite.summarise_curve([(1, 0.0, 2.04), (2, 0.5, 4.96)], (-1, 1), 0.9)
    assert timed["curve"] == [[1, 0.0, 0.0, 2.0], [2, 0.5, 0.5, 5.0]]


def test_train_seconds_to_a_level_come_from_the_first_point_at_or_above_it(suite):
    record = {"curve": [[1, 0, -0.5, 3.0], [2, 0, 0.25, 6.0], [3, 0, 0.2, 9.0], [4, 0, 0.7, 12.0]]}
    assert suite.train_seconds_to(record, 0.25) == 6.0
    assert suite.train_seconds_to(record, 0.3) == 12.0
    assert suite.train_seconds_to(record, 0.8) is None
    assert suite.train_seconds_to({"curve": [[1, 0, 0.5]]}, 0.1) is None  # no times kept


def test_agent_specs(suite):
    assert suite.parse_agent_spec("rppo") == ["--agent", "rppo"]
    assert suite.parse_agent_spec("ours:memory:gamma=0.9, multisteps=5") == [
        "--agent", "ours", "--preset", "memory", "--set", "gamma=0.9", "--set", "multisteps=5",
    ]  # fmt: skip
    assert suite.parse_agent_spec("dqn") == ["--agent", "dqn"]
    assert suite.parse_agent_spec("ours:cartpole") == ["--agent", "ours", "--preset", "cartpole"]
    for bad in ("ours", "ours:atari", "ppo", "dqn:x"):
        with pytest.raises(SystemExit, match="agent spec"):
            suite.parse_agent_spec(bad)
    assert suite.parse_overrides(["gamma=0.9", "enable_dueling=False"]) == {
        "gamma": 0.9,
        "enable_dueling": False,
    }
    with pytest.raises(SystemExit, match="not a Python literal"):
        suite.parse_overrides(["gamma=ninety"])
    for bad in ("gamma", "=0.9"):
        with pytest.raises(SystemExit, match=f"expected FIELD=VALUE, got {bad!r}"):
            suite.parse_overrides([bad])


def test_the_table_puts_agents_side_by_side_with_medians(suite):
    def record(agent, seed, best, solved_at, curve=()):
        return dict(agent=agent, task="cue-10", seed=seed, budget=1000, reward_scale=1.0,
                    best=best, final=best, solved_at=solved_at, stays_solved=solved_at is not None,
                    wall_s=10.0 + seed, train_wall_s=9.0, curve=list(curve))  # fmt: skip

    records = [
        record("ours:masked", 0, 1.0, 500, [[250, 0, -0.6, 2.0], [500, 0, 1.0, 4.0]]),
        record("ours:masked", 1, -0.5, None, [[250, 0, -0.5, 3.0]]),
        record("ours:masked", 2, 0.95, 750),
        record("rppo", 0, -0.5, None, [[250, 0, -0.7, 1.0], [500, 0, -0.5, 5.0]]),
        {"agent": "rppo", "task": "cue-10", "seed": 1, "error": "boom"},
    ]
    rows = suite.markdown_table(records).splitlines()
    assert len(rows) == 4
    assert rows[2].startswith("| cue-10 | ours:masked | 1,000 | 0.95 (1.00 / -0.50 / 0.95)")
    assert "| 750 (2/3) | 2/3 | 11 (9) | 4 (1/1) |" in rows[2]  # only seed 0 has a peer run
    assert "| > 1,000 (0/1) | 0/1 |" in rows[3] and "| rppo |" in rows[3]
    assert rows[3].endswith("| 5 (1/1) |")  # the peer's time to its own best


def test_bad_input_is_named_before_any_run(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, str(PATH), *args], capture_output=True, text=True, cwd=tmp_path
        )

    proc = run("suite", "--agents", "ours:atari", "--out", "x.jsonl")
    assert proc.returncode != 0 and "ours:atari" in proc.stderr
    proc = run("suite", "--agents", "rppo", "--peers-python", "/nope/python", "--out", "x.jsonl")
    assert proc.returncode != 0 and "/nope/python" in proc.stderr
    proc = run("suite", "--agents", "ours:masked", "--tasks", "maze", "--out", "x.jsonl")
    assert proc.returncode != 0 and "maze" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_acrobot_is_scored_from_minus_500_to_0_and_solved_at_gymnasiums_threshold(suite):
    env, score_range = suite.make_task("acrobot")
    assert env.spec.id == "Acrobot-v1" and score_range == (-500.0, 0.0)
    assert env.spec.reward_threshold == -100.0
    # -100 normalises to 0.6, the solved level; CartPole's 475 to 0.9, the default's
    at_threshold = suite.summarise_curve([(1, -100.0)], score_range, suite.solved_level("acrobot"))
    assert at_threshold["curve"][0][2] == 0.6 and at_threshold["solved_at"] == 1
    below = suite.summarise_curve([(1, -101.0)], score_range, suite.solved_level("acrobot"))
    assert below["solved_at"] is None
    assert suite.solved_level("cartpole") == 0.9 and suite.solved_level("tmaze-5") == 0.9


@pytest.mark.parametrize(
    ("task", "budget", "fraction"),
    [("acrobot", 100_000, 0.12), ("acrobot", 50_000, 0.24), ("acrobot", 10_000, 1.0),
     ("cartpole", 50_000, 0.16), ("cartpole", 100_000, 0.08)],
)  # fmt: skip
def test_dqn_keeps_the_zoos_epsilon_ramp_in_env_steps(suite, task, budget, fraction):
    settings = suite.dqn_settings(task, budget)
    assert settings["exploration_fraction"] == pytest.approx(fraction)
    assert "n_timesteps" not in settings  # not a DQN argument
    assert settings["learning_rate"] == suite.DQN_ZOO[task]["learning_rate"]


def test_dqn_on_a_task_without_tuned_settings_is_named_before_any_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(PATH), "suite", "--agents", "dqn", "--tasks", "acrobot", "tmaze-5",
         "--out", "x.jsonl"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0 and "'tmaze-5'" in proc.stderr and "acrobot" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_the_peer_column_takes_recurrent_ppo_where_both_peers_ran(suite):
    def record(agent, best, curve):
        return dict(agent=agent, task="cartpole", seed=0, budget=1000, reward_scale=1.0,
                    best=best, final=best, solved_at=None, stays_solved=False, wall_s=1.0,
                    train_wall_s=1.0, curve=curve)  # fmt: skip

    ours = record("ours:cartpole", 0.5, [[500, 0, 0.2, 2.0], [1000, 0, 0.5, 4.0]])
    rppo = record("rppo", 0.5, [[1000, 0, 0.5, 7.0]])
    dqn = record("dqn", 0.2, [[1000, 0, 0.2, 9.0]])
    for order in ([ours, rppo, dqn], [ours, dqn, rppo]):
        ours_row = suite.markdown_table(order).splitlines()[2]
        assert ours_row.startswith("| cartpole | ours:cartpole |")
        assert ours_row.endswith("| 4 (1/1) |")  # to RecurrentPPO's 0.5, not DQN's 0.2 (2 s)


def test_each_preset_is_called_as_a_user_would_with_the_tasks_spaces(suite):
    from r2d2_agent import presets

    assert suite.preset_config("cartpole", (6,), 3, 1, {}) == presets.cartpole_config(
        input_shape=(6,), nb_actions=3, seed=1
    )
    assert suite.preset_config("masked", (2,), 2, 0, {"gamma": 0.9}) == (
        presets.masked_cartpole_config(input_shape=(2,), nb_actions=2, seed=0, gamma=0.9)
    )
    assert suite.preset_config("memory", (5,), 3, 2, {"memory_span": 20}) == (
        presets.memory_config((5,), 3, seed=2, memory_span=20)
    )
