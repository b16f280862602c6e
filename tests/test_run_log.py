"""A logged manager run, end to end: 2 actors and the learner write one run directory,
a user callback in actor 1 stops the run, checkpoints are kept, the plot command draws the
directory, and a second run resumes from the checkpoints and appends to the same logs.

Two real runs (module-scoped fixtures) serve every test; `python -m r2d2_agent.plot` runs
on the first one's directory. Units of the checks: lines of the JSON-lines files, env steps
and learner updates of the `TrainResult`s and checkpoints.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import pytest
from seed_recording import RecordActorSeeds, read_actor_seeds

from r2d2_agent import R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, R2D2Callback, RunLogCallback
from r2d2_agent.checkpoints import checkpoint_files, read_checkpoint
from r2d2_agent.compat import tf
from r2d2_agent.math import resumed_seed
from r2d2_agent.runlog import read_jsonl, read_run

CARTPOLE = functools.partial(gym.make, "CartPole-v1")

LOGGED = dict(memory_capacity=200, memory_warmup=4, train_interval=2, actor_sync_interval=20)
"""On top of `make_config`'s tiny CartPole: the learner trains from the 4th sequence on,
one update per 2 env steps, so a run of a few hundred env steps logs learner records."""

STOP_AFTER = 25  # episodes of actor 1 before its callback stops the run
OTHERS_AFTER = 100  # and env steps of the other actor (so that both log episodes)
PULLS_AFTER = 4  # and weight pulls of actor 1: the learner published at 10, 20, 30 updates
METRIC_EVERY = 5  # learner updates between two values of the learner's custom metric


class StopAfterEpisodes(R2D2Callback):
    """The user's callback: actor `index` stops the whole run after `episodes` episodes,
    once the other actors made `others` env steps (as far as it knows: `run_env_steps`)
    and it took `pulls` sets of weights (the learner publishes before its first update and
    every 10 updates), so that a slow start of another process cannot end the run before
    it played or learned (the actors' 300 env steps can come before the learner's 20th
    update while the learner still traces its update on a loaded machine)."""

    def __init__(self, index: int, episodes: int, others: int, pulls: int) -> None:
        super().__init__()
        self.index = index
        self.episodes = episodes
        self.others = others
        self.pulls = pulls

    def on_r2d2_actor_episode_end(self, actor_index, runner, episode):
        others = runner.run_env_steps - runner.steps
        if (
            actor_index == self.index
            and runner.episodes >= self.episodes
            and others >= self.others
            and runner.weight_pulls >= self.pulls
        ):
            self.request_stop(f"at least {self.episodes} episodes done")


class CustomMetrics(R2D2Callback):
    """The user's metrics, from every process: each actor's episode lengths, the learner's
    replay size every `METRIC_EVERY` updates, the parent's end of the run."""

    def on_r2d2_actor_episode_end(self, actor_index, runner, episode):
        self.log_metric("episode_steps", episode.episode_steps)

    def on_r2d2_learner_train_end(self, learner):
        if learner.updates % METRIC_EVERY == 0:
            self.log_metric("replay_size", len(learner.replay))

    def on_r2d2_train_end(self):
        self.log_metric("runs_done", 1)


@pytest.fixture(scope="module")
def logged_run(make_config, tmp_path_factory, assert_no_leftovers):
    """Run 1: stopped by actor 1's callback; run 2: resumed from run 1's checkpoints to
    300 env steps more, logging into the same run directory."""
    root = tmp_path_factory.mktemp("logged")
    run_dir, ckpt_dir = str(root / "run"), str(root / "checkpoints")
    config = make_config(**LOGGED)
    callbacks = [
        RunLogCallback(run_dir, interval=10, plot=True),
        CheckpointCallback(ckpt_dir, interval=10, keep=2),
    ]
    with R2D2Manager(
        CARTPOLE,
        config,
        actor_num=2,
        callbacks=[
            *callbacks,
            StopAfterEpisodes(1, STOP_AFTER, OTHERS_AFTER, PULLS_AFTER),
            CustomMetrics(),
        ],
        progress=False,
    ) as manager:
        first = manager.train(nb_steps=20_000, max_seconds=300)
        manager.log_metric("after_train", 2.5)
    assert_no_leftovers()
    first_log = read_run(run_dir)
    checkpoint = read_checkpoint(ckpt_dir)
    kept = [n for n, _ in checkpoint_files(ckpt_dir)]
    total = checkpoint.counters.env_steps + 300
    seeds_dir = str(root / "seeds")
    os.makedirs(seeds_dir)
    resumed_callbacks = [*callbacks, RecordActorSeeds(seeds_dir)]
    with R2D2Manager(
        CARTPOLE, config, actor_num=2, callbacks=resumed_callbacks, progress=False
    ) as manager:
        second = manager.train(nb_steps=total, max_seconds=300, resume_from=ckpt_dir)
    assert_no_leftovers()
    resumed_seeds = read_actor_seeds(seeds_dir, 2)
    return SimpleNamespace(
        first=first,
        first_log=first_log,
        kept=kept,
        checkpoint=checkpoint,
        total=total,
        second=second,
        second_log=read_run(run_dir),
        run_dir=run_dir,
        config=config,
        resumed_seeds=resumed_seeds,
    )


def test_the_resumed_actors_do_not_replay_the_runs_first_episodes(logged_run):
    base = resumed_seed(logged_run.config.seed, logged_run.checkpoint.counters.env_steps)
    assert base not in (None, logged_run.config.seed)
    assert logged_run.resumed_seeds == {0: [base], 1: [base + 1]}


# ----------------------------------------------------------------- the user's stop ----
def test_a_callback_in_an_actor_stops_the_whole_run(logged_run):
    assert logged_run.first.stop_reason == "callback"


def test_the_stop_detail_names_the_actor_and_its_reason(logged_run):
    assert logged_run.first.stop_detail == f"actor 1: at least {STOP_AFTER} episodes done"


# ----------------------------------------------------------------- the run directory --
@pytest.mark.parametrize("index", [0, 1])
def test_each_actor_logs_every_episode_it_finished(logged_run, index):
    logged = [r["episode_return"] for r in logged_run.first_log.actors[index]]
    assert logged == logged_run.first.episode_returns[index]


def test_actor_records_carry_length_epsilon_and_env_steps(logged_run):
    for index, records in logged_run.first_log.actors.items():
        assert {"episode_length", "epsilon", "env_steps", "time"} <= set(records[0])
        assert all(r["actor"] == index for r in records)
        steps = [r["env_steps"] for r in records]
        assert steps == sorted(steps) and steps[-1] <= logged_run.first.actor_env_steps[index]


def test_learner_records_every_interval_updates_and_at_the_end(logged_run):
    updates = [r["updates"] for r in logged_run.first_log.learner]
    assert updates[:2] == [10, 20] and all(u % 10 == 0 for u in updates[:-1])
    assert updates[-1] == logged_run.first.learner_updates


def test_learner_records_carry_every_metric(logged_run):
    records = logged_run.first_log.learner
    fields = {"loss", "mean_q_network", "mean_q_return", "mean_priority", "replay_size"}
    fields |= {"updates_per_second"}
    assert fields | {"env_steps", "env_steps_per_second"} <= set(records[-1])
    assert all(r["loss"] is not None for r in records)


def test_no_log_line_is_torn_or_unreadable(logged_run):
    assert logged_run.first_log.skipped_lines == 0
    assert logged_run.second_log.skipped_lines == 0


def test_run_json_holds_the_config(logged_run, make_config):
    with open(os.path.join(logged_run.run_dir, "run.json")) as file:
        info = json.load(file)
    assert info["config"]["lstm_units"] == make_config().lstm_units


def test_tensorboard_has_the_actors_and_the_learners_scalars(logged_run):
    def tags(sub):
        folder = os.path.join(logged_run.run_dir, "tensorboard", sub)
        return {
            value.tag
            for name in os.listdir(folder)
            for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name))
            for value in event.summary.value
        }

    assert {"charts/episodic_return", "charts/epsilon"} <= tags("actor_1")
    assert {"losses/td_loss", "charts/SPS", "charts/replay_size"} <= tags("learner")


def test_the_run_ends_with_a_learning_curve_picture(logged_run):
    with open(os.path.join(logged_run.run_dir, "learning_curve.png"), "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_plot_command_writes_a_png_from_the_run_directory(logged_run, tmp_path):
    output = tmp_path / "curve.png"
    done = subprocess.run(
        [sys.executable, "-m", "r2d2_agent.plot", logged_run.run_dir, "-o", str(output)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(output)
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and output.stat().st_size > 10_000


def test_the_plot_command_names_a_directory_without_logs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "r2d2_agent.plot", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 2 and "holds no run log" in done.stderr


def test_the_checkpoint_directory_keeps_the_last_two(logged_run):
    assert len(logged_run.kept) == 2


# ----------------------------------------------------------------- resume -------------
def test_a_resumed_run_counts_nb_steps_from_the_checkpoints_total(logged_run):
    second = logged_run.second
    assert second.stop_reason == "nb_steps"
    assert logged_run.total <= second.env_steps <= logged_run.total + 1


def test_a_resumed_run_continues_each_actors_env_steps(logged_run):
    before = logged_run.checkpoint.counters.actor_env_steps
    after = logged_run.second.actor_env_steps
    assert all(a >= b for a, b in zip(after, before, strict=True))


def test_a_resumed_run_continues_the_learner_updates_and_episodes(logged_run):
    counters = logged_run.checkpoint.counters
    # At least the checkpoint's updates, not a count from zero. (Not necessarily more: the
    # numpy actors, which load no TensorFlow, can take the 300 env steps while the learner
    # still builds its update graph on a busy machine.)
    assert logged_run.second.learner_updates >= counters.learner_updates > 0
    assert logged_run.second.episodes > counters.episodes


def test_a_resumed_run_names_its_checkpoint(logged_run):
    assert logged_run.second.resumed_from == logged_run.checkpoint.path


def test_a_resumed_run_appends_to_the_same_actor_logs(logged_run):
    for index in (0, 1):
        first = logged_run.first_log.actors[index]
        second = logged_run.second_log.actors[index]
        assert second[: len(first)] == first and len(second) > len(first)
        # Env steps go on from the checkpoint's count, not from zero.
        assert (
            second[len(first)]["env_steps"]
            > logged_run.checkpoint.counters.actor_env_steps[index] - 1
        )


def test_the_reader_names_an_earlier_versions_mean_q_mean_q_network(tmp_path):
    (tmp_path / "learner.jsonl").write_text('{"updates":10,"loss":0.5,"mean_q":1.5}\n')
    (record,) = read_run(tmp_path).learner
    assert record["mean_q_network"] == 1.5 and "mean_q" not in record


def test_torn_last_lines_are_skipped_by_the_reader(tmp_path):
    path = tmp_path / "actor-0.jsonl"
    path.write_bytes(b'{"actor":0,"episode_return":1.0}\n{"actor":0,"episode_ret')
    records, skipped = read_jsonl(path)
    assert records == [{"actor": 0, "episode_return": 1.0}] and skipped == 1


# ----------------------------------------------------------------- custom metrics -----
def _tensorboard_values(run_dir, folder, tag):
    path = os.path.join(run_dir, "tensorboard", folder)
    return [
        (event.step, value.simple_value)
        for name in sorted(os.listdir(path))
        for event in tf.compat.v1.train.summary_iterator(os.path.join(path, name))
        for value in event.summary.value
        if value.tag == tag
    ]


@pytest.mark.parametrize("index", [0, 1])
def test_a_custom_metric_from_each_actor_lands_in_the_run_directory(logged_run, index):
    records = logged_run.first_log.metric("episode_steps")[f"actor-{index}"]
    lengths = [r["episode_length"] for r in logged_run.first_log.actors[index]]
    assert [r["value"] for r in records] == lengths
    steps = [r["env_steps"] for r in records]
    assert steps == sorted(steps) and steps[-1] <= logged_run.first.env_steps


def test_a_custom_metric_from_the_learner_lands_in_the_run_directory(logged_run):
    records = logged_run.first_log.metric("custom/replay_size")["learner"]
    assert [r["updates"] for r in records][:2] == [METRIC_EVERY, 2 * METRIC_EVERY]
    assert all(r["value"] > 0 and r["env_steps"] > 0 for r in records)


def test_custom_metrics_from_the_parent_land_in_the_run_directory(logged_run):
    by_name = {r["name"]: r for r in logged_run.first_log.metrics if r["process"] == "parent"}
    assert by_name["runs_done"]["value"] == 1 and by_name["after_train"]["value"] == 2.5
    assert by_name["after_train"]["env_steps"] == logged_run.first.env_steps


def test_custom_metrics_of_an_actor_and_the_learner_are_in_tensorboard(logged_run):
    actor = _tensorboard_values(logged_run.run_dir, "actor_1", "custom/episode_steps")
    learner = _tensorboard_values(logged_run.run_dir, "learner", "custom/replay_size")
    records = logged_run.second_log.metric("episode_steps")["actor-1"]
    assert actor == [(r["env_steps"], r["value"]) for r in records]
    assert len(learner) == len(logged_run.second_log.metric("replay_size")["learner"])


def test_the_plot_draws_a_panel_per_custom_metric(logged_run, tmp_path):
    from r2d2_agent.plot import plot_run

    def height(path):  # a PNG's IHDR: width and height at bytes 16-24
        return int.from_bytes(open(path, "rb").read()[20:24], "big")

    plain = plot_run(logged_run.run_dir, tmp_path / "plain.png")
    with_metric = plot_run(logged_run.run_dir, tmp_path / "m.png", metrics=["custom/replay_size"])
    assert height(with_metric) > height(plain)


def test_the_plot_names_the_logged_metrics_for_an_unknown_one(logged_run, tmp_path):
    from r2d2_agent.plot import plot_run

    with pytest.raises(ValueError, match="no custom metric nope.*replay_size"):
        plot_run(logged_run.run_dir, tmp_path / "x.png", metrics=["nope"])
