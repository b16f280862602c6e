"""`TensorBoardCallback`: namespaced TensorBoard scalars, per process, without TensorFlow.

Metric names (CleanRL style): `charts/episodic_return`, `charts/episodic_length`,
`charts/epsilon`, `charts/SPS` (env steps per second), `charts/updates_per_second`,
`charts/updates` (learner updates), `charts/replay_size`, `losses/td_loss`,
`losses/q_values_network` (mean Q of the trained steps in the network's rescaled units),
`losses/q_values_return` (that mean through h⁻¹: return units, as `compute_q_values`),
`losses/priority`, and `custom/<name>` (`log_metric`). Each process writes to its own
subfolder of `logdir` (`agent`, `learner`, `actor_<i>`, `parent`), and every scalar's x
is the run's env steps (all actors), so the folders overlay; the learner's updates are
the scalar `charts/updates`. The event files are written by
`r2d2_agent.runlog.ScalarEventWriter`, which needs no TensorFlow, so numpy actors and the
manager's parent stay free of it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.callbacks.rates import RateMeter
from r2d2_agent.math import inverse_rescale
from r2d2_agent.runlog import ScalarEventWriter

__all__ = ["TensorBoardCallback", "mean_q_in_return_units"]


def mean_q_in_return_units(
    mean_q: float | None, config: Any, reward_scale: float = 1.0
) -> float | None:
    """A learner's `mean_q` (the network's rescaled units) in return units: h⁻¹ of the mean
    when the config rescales values (not the mean of h⁻¹; the two are close when the
    batch's Q-values are), else the mean itself; times `reward_scale` (the learner's,
    with `normalize_rewards`)."""
    if mean_q is None:
        return mean_q
    value = float(inverse_rescale(mean_q)) if config.enable_rescaling else mean_q
    return value * reward_scale if getattr(config, "normalize_rewards", False) else value


def _learner_scalars(learner: Any) -> dict[str, float | None]:
    """The latest update's scalars of an `R2D2Learner`."""
    m = learner.last_metrics
    return {
        "losses/td_loss": m["loss"],
        "losses/q_values_network": m["mean_q"],
        "losses/q_values_return": mean_q_in_return_units(
            m["mean_q"], learner.config, getattr(learner, "reward_scale", 1.0)
        ),
        "losses/priority": m["mean_priority"],
        "charts/replay_size": len(learner.replay),
        "charts/updates": learner.updates,
    }


class TensorBoardCallback(R2D2Callback):
    """Writes training scalars for TensorBoard.

    Args:
        logdir: Run folder, e.g. `runs/CartPole-v1__r2d2__0__<time>`.
        interval: Env steps (agent) or learner updates (learner) between loss summaries.
    """

    def __init__(self, logdir: str, interval: int = 100) -> None:
        super().__init__()
        if interval < 1:
            raise ValueError(f"interval must be >= 1, got {interval!r}")
        self.logdir = os.path.abspath(os.fspath(logdir))  # a Ray worker may have another cwd
        self.interval = int(interval)
        self._writers: dict[str, ScalarEventWriter] = {}
        self._t0 = 0.0
        self._steps = 0
        self._updates_rate = RateMeter()
        self._steps_rate = RateMeter()

    def __getstate__(self) -> dict[str, Any]:  # file writers do not cross processes
        return {**super().__getstate__(), "_writers": {}}

    def _scalars(self, role: str, step: int, values: dict[str, float | None]) -> None:
        writer = self._writers.get(role)
        if writer is None:
            writer = self._writers[role] = ScalarEventWriter(os.path.join(self.logdir, role))
        writer.scalars(step, values)

    def _close(self) -> None:
        for writer in self._writers.values():
            writer.close()

    # Custom metrics (any process) ----------------------------------------------------------
    def on_r2d2_metric(self, record: Any) -> None:
        """A custom metric (`log_metric`): `custom/<name>` in the process's folder, at the
        run's env steps."""
        folder = record.process.replace("-", "_")  # actor-0 -> actor_0
        self._scalars(folder, record.env_steps or 0, {f"custom/{record.name}": record.value})

    # Single-process agent ----------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._t0, self._steps = time.perf_counter(), 0

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        agent = self.model
        if not getattr(agent, "training", False):
            return
        self._steps += 1
        if agent.step % self.interval == 0 and agent.learner.last_metrics:
            sps = self._steps / max(time.perf_counter() - self._t0, 1e-9)
            self._scalars(
                "agent",
                agent.step,
                {
                    **_learner_scalars(agent.learner),
                    "charts/SPS": sps,
                    "charts/epsilon": agent.actor.epsilon,
                },
            )

    def on_episode_end(self, episode: int, logs: dict | None = None) -> None:
        agent = self.model
        if logs and getattr(agent, "training", False):
            self._scalars(
                "agent",
                agent.step,
                {
                    "charts/episodic_return": logs["episode_reward"],
                    "charts/episodic_length": logs["nb_episode_steps"],
                },
            )

    def on_train_end(self, logs: dict | None = None) -> None:
        self._close()

    # Manager: parent process ---------------------------------------------------------------
    def on_r2d2_train_end(self) -> None:
        self._close()

    # Manager: learner process --------------------------------------------------------------
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        self._updates_rate.rate(learner.updates)  # rates leave out start-up and a resume
        self._steps_rate.rate(learner.counters().env_steps)

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0 and learner.last_metrics:
            env_steps = learner.counters().env_steps
            self._scalars(
                "learner",
                env_steps,
                {
                    **_learner_scalars(learner),
                    "charts/updates_per_second": self._updates_rate.rate(learner.updates),
                    "charts/SPS": self._steps_rate.rate(env_steps),
                },
            )

    def on_r2d2_learner_end(self, learner: Any) -> None:
        self._close()

    # Manager: actor processes ----------------------------------------------------------------
    def on_r2d2_actor_episode_end(self, actor_index: int, runner: Any, episode: Any) -> None:
        self._scalars(
            f"actor_{actor_index}",
            getattr(runner, "run_env_steps", runner.steps),  # the run's env steps
            {
                "charts/episodic_return": episode.episode_return,
                "charts/episodic_length": episode.episode_steps,
                "charts/epsilon": runner.epsilon,
            },
        )

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        self._close()
