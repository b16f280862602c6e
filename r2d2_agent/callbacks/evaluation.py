"""`EvaluationCallback`: greedy evaluations during training, keeping the best policy.

A value-based agent's greedy policy can be solved at one evaluation and fail at the next
(benchmarks/RESULTS.md, "Staying solved"). This callback evaluates the greedy policy
(the online network, or its average with `policy_average_updates`) every `interval` on
an env of its own, keeps the weights of the best evaluation (in memory, and atomically
in `best_path` as a checkpoint), can hand them back to the agent when training ends, and
can end the run once a mean return is reached: what Stable-Baselines3's `EvalCallback`
and Keras's `restore_best_weights` do.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.checkpoints import write_checkpoint
from r2d2_agent.leftovers import reclaim_temp_files
from r2d2_agent.roles.actor import R2D2Actor
from r2d2_agent.roles.episode_loop import EpisodeLoop, EpisodeObserver, EpisodeResult

__all__ = ["Evaluation", "EvaluationCallback"]

logger = logging.getLogger(__name__)

_FILE_SUFFIXES = (".h5", ".hdf5")


@dataclass(frozen=True)
class Evaluation:
    """One greedy evaluation.

    Attributes:
        env_steps: The run's training env steps when it ran.
        updates: The learner updates when it ran.
        mean_return: The mean return of its episodes.
        returns: Each episode's return.
    """

    env_steps: int
    updates: int
    mean_return: float
    returns: tuple[float, ...]


class _Returns(EpisodeObserver):
    """Collects the returns of the episodes an `EpisodeLoop` plays."""

    def __init__(self) -> None:
        self.returns: list[float] = []

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.returns.append(float(result.episode_return))


class EvaluationCallback(R2D2Callback):
    """Evaluates the greedy policy every `interval` and keeps the best weights.

    Each evaluation plays `episodes` whole episodes on an env made by `make_env` (one
    env for the run, reset with `seed` before the first evaluation only, so that each
    evaluation sees new episodes) with exploration rate `epsilon`, on the learner's
    current greedy-policy weights (`get_policy_weights`: the online weights, or their
    average with `config.policy_average_updates`); training waits meanwhile. The mean
    return is logged (`logging`, and with a `RunLogCallback` or `TensorBoardCallback`
    attached, `log_metric("eval_mean_return")`: TensorBoard's `custom/eval_mean_return`).
    An evaluation whose mean is above every earlier one becomes the best: its weights are
    kept, and written to `best_path` (a checkpoint, atomically) when given.

    Works on an `R2D2Agent` (`fit`'s callbacks; `interval` in env steps) and on an
    `R2D2Manager` (`interval` in learner updates; evaluations run in the learner process,
    so `evaluations` and `best_weights` are filled there: read `best_path` after the
    run).

    Args:
        make_env: A zero-argument callable returning a Gymnasium env (picklable for the
            manager, e.g. a module-level function or `functools.partial`).
        interval: Env steps (agent) or learner updates (manager) between evaluations.
        episodes: Episodes per evaluation.
        best_path: A `.h5` file that receives a checkpoint (weights, optimizer, counters)
            at every new best; `load_weights` and `resume_from` take it. None: kept in
            memory only.
        restore_best: When training ends (each `fit` call, or the manager's learner),
            set the online and target networks (and the average) to the best weights:
            the agent acts with them afterwards, and in a manager run the callbacks
            listed after this one see them (a `CheckpointCallback`'s final save).
            Training on afterwards starts from them. Nothing changes if no evaluation ran.
        stop_at: End the run (`request_stop`) at the first evaluation whose mean return
            reaches this value; None never stops.
        epsilon: Exploration rate of the evaluations; None takes `config.test_epsilon`.
        seed: Seed of the evaluation env's first reset and of the exploration.
        max_episode_steps: Truncate evaluation episodes after this many steps (None:
            the env's own limit; an env without one needs it).

    Raises:
        ValueError: On a non-callable or unpicklable `make_env`, an `interval`,
            `episodes` or `max_episode_steps` below 1, an `epsilon` outside [0, 1], a
            `best_path` that is not an `.h5`/`.hdf5` file or a non-finite `stop_at`.

    Example:
        >>> import gymnasium as gym
        >>> from functools import partial
        >>> evaluation = EvaluationCallback(partial(gym.make, "CartPole-v1"), interval=5_000,
        ...                                 stop_at=475.0)
        >>> evaluation.best_mean is None
        True
    """

    def __init__(
        self,
        make_env: Callable[[], Any],
        interval: int = 10_000,
        episodes: int = 10,
        best_path: str | os.PathLike[str] | None = None,
        restore_best: bool = False,
        stop_at: float | None = None,
        epsilon: float | None = None,
        seed: int | None = 0,
        max_episode_steps: int | None = None,
    ) -> None:
        super().__init__()
        if not callable(make_env):
            raise ValueError(f"make_env must be a zero-argument callable, got {make_env!r}")
        try:
            pickle.dumps(make_env)
        except Exception as error:  # pickle raises several types
            raise ValueError(
                f"make_env {make_env!r} cannot be pickled ({error}): a manager run sends it "
                "to the learner process; use a module-level function or functools.partial"
            ) from error
        for name, value in (("interval", interval), ("episodes", episodes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool)
            or not isinstance(max_episode_steps, int)
            or max_episode_steps < 1
        ):
            raise ValueError(
                f"max_episode_steps must be None or an int >= 1, got {max_episode_steps!r}"
            )
        if epsilon is not None and not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be None or in [0, 1], got {epsilon!r}")
        if stop_at is not None and not math.isfinite(stop_at):
            raise ValueError(f"stop_at must be None or a finite number, got {stop_at!r}")
        if best_path is not None:
            best_path = os.path.abspath(os.fspath(best_path))
            if not best_path.endswith(_FILE_SUFFIXES):
                raise ValueError(f"best_path must end in .h5 or .hdf5, got {best_path!r}")
        self.make_env = make_env
        self.interval = interval
        self.episodes = episodes
        self.best_path = best_path
        self.restore_best = bool(restore_best)
        self.stop_at = None if stop_at is None else float(stop_at)
        self.epsilon = epsilon
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.evaluations: list[Evaluation] = []
        """Every evaluation of this copy of the callback, in order."""
        self.best: Evaluation | None = None
        """The best evaluation so far (the first of equal means)."""
        self.best_weights: list[np.ndarray] | None = None
        """The weights `best` was played with (`get_policy_weights`)."""
        self._env: Any = None
        self._actor: R2D2Actor | None = None

    @property
    def best_mean(self) -> float | None:
        """The best mean return so far (None before the first evaluation)."""
        return None if self.best is None else self.best.mean_return

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_env"] = state["_actor"] = None  # made again in the process that evaluates
        return state

    # Evaluating ---------------------------------------------------------------------------

    def evaluate(self, learner: Any, env_steps: int) -> Evaluation:
        """Plays `episodes` greedy episodes on `learner`'s policy weights; keeps the best.

        Args:
            learner: The `R2D2Learner` (its `config`, `policy_factory`, `get_policy_weights`,
                `updates`, `save`), as `R2D2Builder.make_learner` builds it.
            env_steps: The run's training env steps, for the record.

        Raises:
            RuntimeError: If the learner has no `policy_factory` to act with.

        Returns:
            The evaluation (also appended to `evaluations`).
        """
        config = learner.config
        if self._actor is None:
            if learner.policy_factory is None:
                raise RuntimeError("the learner has no policy_factory (build it with make_learner)")
            epsilon = config.test_epsilon if self.epsilon is None else self.epsilon
            self._actor = R2D2Actor(config, learner.policy_factory(), None, epsilon, self.seed)
            self._env = self.make_env()
            first_seed = self.seed
        else:
            first_seed = None  # later evaluations continue the env's randomness
        weights = learner.get_policy_weights()
        self._actor.set_weights(weights)
        returns = _Returns()
        loop = EpisodeLoop(
            self._env,
            self._actor,
            observers=[returns],
            seed=first_seed,
            max_episode_steps=self.max_episode_steps,
        )
        loop.run(nb_episodes=self.episodes)
        self._actor.reset_state()
        mean = float(np.mean(returns.returns))
        result = Evaluation(int(env_steps), int(learner.updates), mean, tuple(returns.returns))
        self.evaluations.append(result)
        if self.best is None or mean > self.best.mean_return:
            self.best, self.best_weights = result, [np.array(w) for w in weights]
            if self.best_path is not None:
                write_checkpoint(self.best_path, learner.save(replay=False))
        logger.info(
            "evaluation at %d env steps: mean return %.2f over %d episodes (best %.2f at %d)",
            result.env_steps,
            mean,
            self.episodes,
            self.best.mean_return,
            self.best.env_steps,
        )
        if self.metrics_written:
            self.log_metric("eval_mean_return", mean)
        if self.stop_at is not None and mean >= self.stop_at and self._stop_requester is not None:
            self.request_stop(f"evaluation mean return {mean:.2f} reached stop_at={self.stop_at}")
        return result

    def _restore(self, learner: Any) -> bool:
        """With `restore_best`, sets the best weights (if any); returns whether it did."""
        if not self.restore_best or self.best_weights is None:
            return False
        learner.set_weights(self.best_weights)
        logger.info(
            "restored the best evaluated weights (mean return %.2f at %d env steps)",
            self.best.mean_return,
            self.best.env_steps,
        )
        return True

    def close(self) -> None:
        """Closes the evaluation env (a later evaluation makes a new one, seeded again).

        A manager run closes it when its learner ends; after `fit` it stays open, so that
        the next `fit` with this callback continues its episodes.
        """
        if self._env is not None:
            self._env.close()
        self._env = self._actor = None

    def _reclaim(self) -> None:
        if self.best_path is not None:
            reclaim_temp_files(os.path.dirname(self.best_path))

    # Single-process agent (keras-rl hooks; self.model is the agent) ----------------------

    def on_train_begin(self, logs: dict | None = None) -> None:
        if getattr(self.model, "training", False):
            self._reclaim()

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        agent = self.model
        if getattr(agent, "training", False) and agent.step % self.interval == 0:
            self.evaluate(agent.learner, agent.step)

    def on_train_end(self, logs: dict | None = None) -> None:
        agent = self.model
        if getattr(agent, "training", False) and self._restore(agent.learner):
            agent.sync_actor()

    # Manager: runs in the learner process -------------------------------------------------

    def on_r2d2_learner_begin(self, learner: Any) -> None:
        self._reclaim()

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        if learner.updates % self.interval == 0:
            self.evaluate(learner, learner.counters().env_steps)

    def on_r2d2_learner_end(self, learner: Any) -> None:
        self._restore(learner)
        self.close()
