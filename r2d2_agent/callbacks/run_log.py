"""`RunLogCallback`: every process of a run logs into one run directory.

Each process appends JSON lines to its own file (see `r2d2_agent.runlog.files` for why
one file per process): actor i writes `actor-<i>.jsonl` (one line per episode), the
learner `learner.jsonl` (one line every `interval` updates) and `run.json`, the parent
`eval.jsonl` (`log_evaluation`), and every process its custom metrics
(`R2D2Callback.log_metric`) to `metrics-<process>.jsonl`. TensorBoard summaries go to
`RUN_DIR/tensorboard` through a `TensorBoardCallback`. The single-process agent writes the
same files (as actor 0 and the learner), so `python -m r2d2_agent.plot RUN_DIR` draws
either kind of run.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.callbacks.rates import RateMeter
from r2d2_agent.callbacks.tensorboard import TensorBoardCallback, mean_q_in_return_units
from r2d2_agent.checkpoints import config_as_data
from r2d2_agent.runlog import (
    EVAL_FILE,
    INFO_FILE,
    LEARNER_FILE,
    JsonLinesWriter,
    actor_file,
    metrics_file,
    write_json_atomic,
)

__all__ = ["RunLogCallback"]

logger = logging.getLogger(__name__)


class RunLogCallback(R2D2Callback):
    """Writes a run directory: per-actor episodes, learner metrics, evaluations,
    TensorBoard summaries and, if asked, the learning-curve picture at the end.

    Args:
        run_dir: The run directory (created if needed; a resumed run appends to it).
        interval: Learner updates (manager) or env steps (agent) between learner records.
        tensorboard: Also write TensorBoard summaries to `run_dir/tensorboard`.
        plot: Draw `run_dir/learning_curve.png` when training ends (needs matplotlib).

    Raises:
        ValueError: If `interval` is below 1.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        interval: int = 100,
        tensorboard: bool = True,
        plot: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be an int >= 1, got {interval!r}")
        self.run_dir = os.path.abspath(os.fspath(run_dir))  # a Ray worker may have another cwd
        self.interval = interval
        self.plot = bool(plot)
        self.tensorboard = (
            TensorBoardCallback(os.path.join(self.run_dir, "tensorboard"), interval)
            if tensorboard
            else None
        )
        self.plot_path: str | None = None
        """The picture drawn at the end (None before, or if drawing failed)."""
        self._writers: dict[str, JsonLinesWriter] = {}
        self._updates_rate = RateMeter()
        self._steps_rate = RateMeter()
        self._eval_returns: list[float] = []

    def __getstate__(self) -> dict[str, Any]:  # open files stay in their process
        return {**super().__getstate__(), "_writers": {}}

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        if self.tensorboard is not None:
            self.tensorboard.set_model(model)

    # Writing -------------------------------------------------------------------------

    def _write(self, name: str, record: dict[str, Any]) -> None:
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = JsonLinesWriter(os.path.join(self.run_dir, name))
        writer.write({"time": time.time(), **record})

    def _close(self) -> None:
        for writer in self._writers.values():
            writer.close()

    def _write_info(self, config: Any, role: str) -> None:
        from r2d2_agent import __version__

        path = os.path.join(self.run_dir, INFO_FILE)
        info = {
            "config": config_as_data(config),
            "library_version": __version__,
            "started": time.time(),
            "written_by": role,
        }
        write_json_atomic(path, info)

    def _learner_record(self, learner: Any, env_steps: int) -> None:
        metrics = learner.last_metrics
        self._write(
            LEARNER_FILE,
            {
                "updates": learner.updates,
                "env_steps": env_steps,
                "loss": metrics.get("loss"),
                "mean_q_network": metrics.get("mean_q"),
                "mean_q_return": mean_q_in_return_units(
                    metrics.get("mean_q"), learner.config, getattr(learner, "reward_scale", 1.0)
                ),
                "mean_priority": metrics.get("mean_priority"),
                "replay_size": len(learner.replay),
                "updates_per_second": self._updates_rate.rate(learner.updates),
                "env_steps_per_second": self._steps_rate.rate(env_steps),
            },
        )

    def log_evaluation(self, env_steps: int, returns: list[float]) -> None:
        """Records an evaluation (e.g. `manager.evaluate()` after `train`): its mean
        return becomes a point of the plot at `env_steps`.

        Args:
            env_steps: Env steps of the run when the evaluated weights were current.
            returns: The evaluation episodes' returns.
        """
        returns = [float(r) for r in returns]
        mean = sum(returns) / len(returns) if returns else None
        self._write(
            EVAL_FILE, {"env_steps": int(env_steps), "mean_return": mean, "returns": returns}
        )
        self._close()

    def on_r2d2_metric(self, record: Any) -> None:
        """A custom metric of this process (`log_metric`): a line of
        `metrics-<process>.jsonl`, and TensorBoard's `custom/<name>`."""
        self._write(
            metrics_file(record.process),
            {
                "time": record.time,
                "process": record.process,
                "name": record.name,
                "value": record.value,
                "env_steps": record.env_steps,
                "updates": record.updates,
            },
        )
        self._forward("on_r2d2_metric", record)

    def _draw(self) -> None:
        if not self.plot:
            return
        try:
            from r2d2_agent.plot import plot_run

            self.plot_path = plot_run(self.run_dir)
            logger.info("learning curve: %s", self.plot_path)
        except Exception as exc:  # a failed picture must not fail the run
            logger.warning("could not draw the learning curve of %s: %s", self.run_dir, exc)

    def _forward(self, hook: str, *args: Any) -> None:
        if self.tensorboard is not None:
            getattr(self.tensorboard, hook)(*args)

    # Manager: parent process ---------------------------------------------------------------
    def on_r2d2_train_begin(self) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        logger.info("run directory: %s", os.path.abspath(self.run_dir))

    def on_r2d2_train_end(self) -> None:
        self._close()
        self._forward("on_r2d2_train_end")
        self._draw()

    # Manager: learner process --------------------------------------------------------------
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        self._write_info(learner.config, "learner")
        self._updates_rate.rate(learner.updates)
        self._steps_rate.rate(learner.counters().env_steps)

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0:
            self._learner_record(learner, learner.counters().env_steps)
        self._forward("on_r2d2_learner_train_end", learner)

    def on_r2d2_learner_end(self, learner: Any) -> None:
        if learner.last_metrics and learner.updates % self.interval:
            self._learner_record(learner, learner.counters().env_steps)
        self._close()
        self._forward("on_r2d2_learner_end", learner)

    # Manager: actor processes ----------------------------------------------------------------
    def on_r2d2_actor_episode_end(self, actor_index: int, runner: Any, episode: Any) -> None:
        self._write(
            actor_file(actor_index),
            {
                "actor": actor_index,
                "episode": runner.episodes,
                "episode_return": episode.episode_return,
                "episode_length": episode.episode_steps,
                "epsilon": runner.epsilon,
                "env_steps": runner.steps,
            },
        )
        self._forward("on_r2d2_actor_episode_end", actor_index, runner, episode)

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        self._close()
        self._forward("on_r2d2_actor_end", actor_index, runner)

    # Single-process agent (keras-rl hooks; self.model is the agent) ----------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        agent = self.model
        if agent.training:
            self._write_info(agent.config, "agent")
            self._updates_rate.rate(agent.learner.updates)
            self._steps_rate.rate(agent.step)
            logger.info("run directory: %s", os.path.abspath(self.run_dir))
        self._eval_returns = []
        self._forward("on_train_begin", logs)

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        agent = self.model
        if agent.training and agent.step % self.interval == 0 and agent.learner.last_metrics:
            self._learner_record(agent.learner, agent.step)
        self._forward("on_step_end", step, logs)

    def on_episode_end(self, episode: int, logs: dict | None = None) -> None:
        agent = self.model
        logs = logs or {}
        if agent.training:
            self._write(
                actor_file(0),
                {
                    "actor": 0,
                    "episode": agent.episodes,
                    "episode_return": logs.get("episode_reward"),
                    "episode_length": logs.get("nb_episode_steps"),
                    "epsilon": agent.actor.epsilon,
                    "env_steps": agent.step,
                },
            )
        elif "episode_reward" in logs:
            self._eval_returns.append(float(logs["episode_reward"]))
        self._forward("on_episode_end", episode, logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        agent = self.model
        if not agent.training and self._eval_returns:  # test(): one evaluation point
            self.log_evaluation(agent.step, self._eval_returns)
        self._close()
        self._forward("on_train_end", logs)
        if agent.training:
            self._draw()
