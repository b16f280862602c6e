"""`StateDiscrepancyCallback`: is burn-in long enough? The recurrent-state diagnostic of
Kapturowski et al. (2019, Fig. 1) for an `R2D2Manager` run.

The manager's episodes are played in its actor processes, the network that is measured
lives in the learner process. The callback bridges them through files in its directory:

* each actor taps every env with an `EpisodeRecorder` when it begins (one recorder per
  env with `envs_per_actor` > 1, in `R2D2VectorActor.taps`) and writes the episodes they keep to
  `DIR/state_discrepancy_episodes/actor-<i>.npz` (`write_episodes`: atomic; the file is
  rewritten with the kept episodes at most every `write_seconds` and when the actor
  ends);
* the learner reads the newest of those files every `interval` learner updates and when
  it ends, runs `R2D2Learner.state_discrepancy` on them and writes
  `DIR/state_discrepancy.json` (the result: mean and median ΔQ per trained step and
  start, counts, summary) and `DIR/state_discrepancy.png` (the plot), and logs
  `diagnostics/state_discrepancy_first_step` (mean ΔQ of the stored state with burn-in
  at the window's first trained step), `diagnostics/state_discrepancy_mean` and
  `diagnostics/state_discrepancy_zero_first_step` (zero state with burn-in) through
  `log_metric` (a `RunLogCallback` or `TensorBoardCallback` writes them).

`episodes()` reads the recorded episodes in any process, e.g. after `train` for
`manager.create_test_agent().state_discrepancy(burnin=..., episodes=...)`. Nothing here
imports TensorFlow (the actors stay free of it); the learner's plot needs matplotlib.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from typing import Any

import numpy as np

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.leftovers import reclaim_temp_files
from r2d2_agent.roles.state_discrepancy import (
    EpisodeRecorder,
    RecordedEpisode,
    StateDiscrepancy,
    read_episodes,
    write_episodes,
)
from r2d2_agent.runlog import write_json_atomic

__all__ = [
    "EPISODES_FOLDER",
    "RESULT_FILE",
    "RESULT_PLOT",
    "StateDiscrepancyCallback",
    "discrepancy_as_data",
]

logger = logging.getLogger(__name__)

EPISODES_FOLDER = "state_discrepancy_episodes"
"""Subfolder of the callback's directory with one `actor-<i>.npz` per actor."""

RESULT_FILE = "state_discrepancy.json"
"""The latest result, in the callback's directory."""

RESULT_PLOT = "state_discrepancy.png"
"""Its plot."""


def discrepancy_as_data(result: StateDiscrepancy, **extra: Any) -> dict[str, Any]:
    """A `StateDiscrepancy` as JSON-ready data (lists of floats, NaN as None when
    written by `write_json_atomic`).

    Args:
        result: The result.
        **extra: More top-level keys (e.g. `updates`, `env_steps`).
    """
    return {
        **extra,
        "burnin": result.burnin,
        "input_length": result.input_length,
        "period": result.period,
        "nb_sequences": result.nb_sequences,
        "nb_episodes": result.nb_episodes,
        "counts": [int(c) for c in result.counts],
        "by_step": {k: [float(x) for x in v] for k, v in result.by_step.items()},
        "median_by_step": {k: [float(x) for x in v] for k, v in result.median_by_step.items()},
        "summary": result.summary(),
    }


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


class StateDiscrepancyCallback(R2D2Callback):
    """Records episodes in the actors and measures the recurrent-state discrepancy in
    the learner, every `interval` updates and at the end (see the module docstring).

    Args:
        directory: Where the files go (e.g. the run directory of a `RunLogCallback`).
        keep: Recorded episodes each env keeps (the newest), at least 1.
        every: Each env records one episode out of this many, at least 1.
        interval: Learner updates between measurements (also one when the learner
            ends).
        burnin: Burn-in steps to measure; None: the config's.
        write_seconds: Seconds between an actor's rewrites of its episodes file, >= 0
            (0: after every recorded episode; the first is written at once).
        plot: Draw `state_discrepancy.png` with each result (needs matplotlib).
        statistic: "mean" (the paper's) or "median" curves in the plot.

    Raises:
        ValueError: On a bad argument (naming it and its value).

    Attributes:
        last_result: The learner's latest `StateDiscrepancy` (in the learner's copy).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keep: int = 20,
        every: int = 1,
        interval: int = 1_000,
        burnin: int | None = None,
        write_seconds: float = 10.0,
        plot: bool = True,
        statistic: str = "mean",
    ) -> None:
        super().__init__()
        self.directory = os.path.abspath(os.fspath(directory))  # a Ray worker's cwd differs
        self.keep = _check_int("keep", keep, 1)
        self.every = _check_int("every", every, 1)
        self.interval = _check_int("interval", interval, 1)
        self.burnin = None if burnin is None else _check_int("burnin", burnin, 0)
        if isinstance(write_seconds, bool) or not isinstance(write_seconds, (int, float)):
            raise ValueError(f"write_seconds must be a number >= 0, got {write_seconds!r}")
        if not write_seconds >= 0:
            raise ValueError(f"write_seconds must be a number >= 0, got {write_seconds!r}")
        self.write_seconds = float(write_seconds)
        if statistic not in ("mean", "median"):
            raise ValueError(f'statistic must be "mean" or "median", got {statistic!r}')
        self.plot = bool(plot)
        self.statistic = statistic
        self.last_result: StateDiscrepancy | None = None
        self._recorders: list[EpisodeRecorder] = []
        self._written: tuple[int, ...] = ()  # id of each recorder's newest kept episode
        self._last_write: float | None = None

    def __getstate__(self) -> dict[str, Any]:  # recorders stay in their actor
        return {**super().__getstate__(), "_recorders": [], "_written": (), "_last_write": None}

    # Files ---------------------------------------------------------------------------

    @property
    def episodes_folder(self) -> str:
        """Where the actors write their episodes."""
        return os.path.join(self.directory, EPISODES_FOLDER)

    def episodes_file(self, actor_index: int) -> str:
        """The episodes file of actor `actor_index`."""
        return os.path.join(self.episodes_folder, f"actor-{int(actor_index)}.npz")

    def episodes(self) -> list[RecordedEpisode]:
        """The recorded episodes of all actors' files (the newest each actor wrote),
        actor by actor, oldest first.

        Returns:
            The episodes (empty if there are none yet). A file that cannot be read is
            skipped with a warning.
        """
        episodes: list[RecordedEpisode] = []
        for path in sorted(glob.glob(os.path.join(self.episodes_folder, "actor-*.npz"))):
            try:
                episodes += read_episodes(path)[0]
            except (OSError, ValueError) as exc:  # e.g. removed between glob and read
                logger.warning("skipping episodes file %s: %s", path, exc)
        return episodes

    # Actors --------------------------------------------------------------------------

    def on_r2d2_actor_begin(self, actor_index: int, runner: Any) -> None:
        """Taps each env with an `EpisodeRecorder` (`R2D2VectorActor.taps`: each env's
        calls as its own adder would get them, besides the actor's adder)."""
        self._recorders = []
        taps = runner.actor.taps  # one per env, beside the actor's adder
        for env, tap in enumerate(taps):
            recorder = EpisodeRecorder(tap, self.keep, self.every)
            taps[env] = recorder
            self._recorders.append(recorder)
        self._written = tuple(0 for _ in self._recorders)
        self._last_write = None

    def _newest(self) -> tuple[int, ...]:
        return tuple(id(r.episodes[-1]) if r.episodes else 0 for r in self._recorders)

    def _write(self, actor_index: int, runner: Any) -> None:
        newest = self._newest()
        if newest == self._written:
            return
        episodes = [e for r in self._recorders for e in r.episodes]
        envs = [j for j, r in enumerate(self._recorders) for _ in r.episodes]
        write_episodes(
            self.episodes_file(actor_index),
            episodes,
            actor=actor_index,
            env=np.array(envs, np.int64),
            env_steps=int(runner.steps),
            time=time.time(),
        )
        self._written = newest
        self._last_write = time.monotonic()

    def on_r2d2_actor_episode_end(self, actor_index: int, runner: Any, episode: Any) -> None:
        """Rewrites the episodes file when a recorder kept a new episode (at most every
        `write_seconds`)."""
        if not self._recorders:
            return
        if self._last_write is not None:
            if time.monotonic() - self._last_write < self.write_seconds:
                return
        self._write(actor_index, runner)

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        """Writes what the recorders kept since the last write."""
        if self._recorders:
            self._write(actor_index, runner)

    # Learner -------------------------------------------------------------------------

    def on_r2d2_learner_begin(self, learner: Any) -> None:
        """Removes the episodes files of an earlier run in the same directory (the
        actors write theirs only after the first weights, published after this hook)
        and the temp files that killed writers left behind."""
        if not learner.config.enable_lstm:
            logger.warning("StateDiscrepancyCallback needs an LSTM (lstm_units > 0): off")
        for path in glob.glob(os.path.join(self.episodes_folder, "actor-*.npz")):
            os.remove(path)
        reclaim_temp_files(self.episodes_folder)
        reclaim_temp_files(self.directory)  # the result's and the plot's

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0:
            self.measure(learner)

    def on_r2d2_learner_end(self, learner: Any) -> None:
        if self.last_result is None or learner.updates % self.interval:
            self.measure(learner)

    def measure(self, learner: Any) -> StateDiscrepancy | None:
        """Measures the learner's current network on the newest recorded episodes and
        writes the JSON, the plot and the metrics; call it from any learner hook.

        Args:
            learner: The `R2D2Learner`.

        Returns:
            The result, or None when no episode is recorded yet or the measurement
            failed (a warning says why: a diagnostic never ends the run).
        """
        if not learner.config.enable_lstm:
            return None
        episodes = self.episodes()
        if not episodes:
            logger.info("state discrepancy: no recorded episode yet in %s", self.episodes_folder)
            return None
        try:
            result = learner.state_discrepancy(episodes, self.burnin)
        except (ValueError, TypeError) as exc:  # e.g. files of another run's config
            logger.warning("state discrepancy failed on %d episodes: %s", len(episodes), exc)
            return None
        self.last_result = result
        data = discrepancy_as_data(
            result,
            updates=int(learner.updates),
            env_steps=int(learner.counters().env_steps),
            time=time.time(),
        )
        write_json_atomic(os.path.join(self.directory, RESULT_FILE), data)
        self._draw(result, learner.updates)
        summary = result.summary()
        for name, key in (
            ("diagnostics/state_discrepancy_first_step", "stored_burnin_first"),
            ("diagnostics/state_discrepancy_mean", "stored_burnin_mean"),
            ("diagnostics/state_discrepancy_zero_first_step", "zero_burnin_first"),
        ):
            if np.isfinite(summary[key]) and self._metric_logger is not None:
                self.log_metric(name, summary[key])
        return result

    def _draw(self, result: StateDiscrepancy, updates: int) -> None:
        if not self.plot:
            return
        try:
            from r2d2_agent.plot import plot_state_discrepancy

            title = (
                f"recurrent-state discrepancy after {updates} updates: burn-in "
                f"{result.burnin}, {result.nb_sequences} sequences of {result.nb_episodes} "
                "episodes"
            )
            plot_state_discrepancy(
                result,
                os.path.join(self.directory, RESULT_PLOT),
                title=title,
                statistic=self.statistic,
            )
        except Exception as exc:  # a failed picture must not fail the run
            logger.warning("could not draw the state discrepancy: %s", exc)
