"""`R2D2Manager`: R2D2 with N actor processes and one learner process.

The manager validates its inputs in the parent (before any child starts, and without
importing TensorFlow), then `train` starts the processes with the ``spawn`` method:

* the learner builds the network and reports its weight layout; the manager creates the
  shared-memory segment (so it can always unlink it) and hands it to the learner, which
  publishes weights there; actors read them every `actor_sync_interval` env steps without
  pickling;
* actor i acts in its own env (seed = seed + i, Ape-X ε_i) and sends sequences through its
  own bounded pipe to the learner (`r2d2_agent.channels` explains why not one queue);
* the parent supervises: progress, limits, restarts of dead actors, the learner's errors,
  Ctrl-C, and a shutdown that leaves no process, no pipe and no segment behind.

Use it under ``if __name__ == "__main__":`` (spawned children import the main module).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from r2d2_agent.actor import resolve_use_numpy
from r2d2_agent.children import R2D2ProcessError
from r2d2_agent.config import R2D2Config
from r2d2_agent.reports import Progress, TrainResult
from r2d2_agent.runners import call_hooks
from r2d2_agent.supervisor import Supervisor

logger = logging.getLogger(__name__)

__all__ = ["Progress", "R2D2Manager", "R2D2ProcessError", "TrainResult"]


class R2D2Manager:
    """Distributed R2D2 on one machine: actor processes, a learner process, shared weights.

    Args:
        env_factory: picklable zero-argument callable returning a gymnasium env (e.g.
            ``functools.partial(gymnasium.make, "CartPole-v1")``).
        config: the agent's configuration; its `input_shape` and `nb_actions` must match
            the env's spaces.
        actor_num: number of actor processes (>= 1).
        image_model: picklable `ImageModel` for image inputs.
        callbacks: picklable callbacks (`R2D2Callback` hooks; duck typing works): the
            train hooks run in the parent, the learner hooks in the learner, the actor
            hooks in every actor (each process gets its own copy).
        max_actor_restarts: restarts allowed per actor index after it dies; one more
            death stops the run with `R2D2ProcessError`.
        actors_on_cpu: hide GPUs from actor processes, so N actors do not each reserve GPU
            memory (the learner alone uses the GPU).
        use_numpy_policy: act with the numpy forward pass (no TensorFlow in actors);
            None: whenever the network allows it (value inputs, no image model).
        observation_dtype: dtype of stored observations (uint8 for Atari frames).
        rate_limit: keep learner updates and received env steps in a fixed ratio (see
            `env_steps_per_update`); False lets both sides run free.
        env_steps_per_update: env steps (all actors) per learner update when rate limiting;
            None means `config.train_interval`, the single-process agent's ratio.
        ratio_tolerance: allowed drift from that ratio, in learner updates.
        publish_interval: learner updates between weight publications.
        send_batch_size: sequences an actor gathers before one send.
        progress: show a progress bar (tqdm; it stays quiet when stderr is not a TTY).
        shutdown_timeout: seconds children get to stop before they are terminated.

    Raises:
        TypeError, ValueError: on bad inputs, before any process starts.
    """

    def __init__(self, env_factory: Callable[[], Any], config: R2D2Config, actor_num: int = 1,
                 image_model: Any = None, callbacks: Sequence[Any] | None = None, *,
                 max_actor_restarts: int = 3, actors_on_cpu: bool = True,
                 use_numpy_policy: bool | None = None, observation_dtype: Any = np.float32,
                 rate_limit: bool = True, env_steps_per_update: float | None = None,
                 ratio_tolerance: float = 16.0, publish_interval: int = 10,
                 send_batch_size: int = 4, progress: bool = True,
                 shutdown_timeout: float = 10.0) -> None:
        if not isinstance(config, R2D2Config):
            raise TypeError(f"config must be an R2D2Config, got {type(config).__name__}")
        if isinstance(actor_num, bool) or not isinstance(actor_num, int) or actor_num < 1:
            raise ValueError(f"actor_num must be an int >= 1, got {actor_num!r}")
        for name, value, low in (("max_actor_restarts", max_actor_restarts, 0),
                                 ("publish_interval", publish_interval, 1),
                                 ("send_batch_size", send_batch_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if env_steps_per_update is not None and not env_steps_per_update > 0:
            raise ValueError(f"env_steps_per_update must be > 0, got {env_steps_per_update}")
        if not ratio_tolerance >= 1:
            raise ValueError(f"ratio_tolerance must be >= 1 update, got {ratio_tolerance}")
        if not callable(env_factory):
            raise TypeError(f"env_factory must be a zero-argument callable returning a "
                            f"gymnasium env, got {type(env_factory).__name__}")
        self.env_factory, self.config, self.actor_num = env_factory, config, actor_num
        self.image_model = image_model
        self.callbacks = list(callbacks or [])
        self.use_numpy_policy = resolve_use_numpy(config, image_model, use_numpy_policy)
        self.max_actor_restarts, self.actors_on_cpu = max_actor_restarts, actors_on_cpu
        self.observation_dtype = np.dtype(observation_dtype)
        self.env_steps_per_update = (None if not rate_limit else
                                     float(env_steps_per_update or config.train_interval))
        self.ratio_tolerance, self.publish_interval = ratio_tolerance, publish_interval
        self.send_batch_size, self.progress = send_batch_size, progress
        self.shutdown_timeout = shutdown_timeout
        _pickle("env_factory", env_factory, "use a module-level function or functools."
                "partial(gymnasium.make, 'CartPole-v1'); lambdas and local functions cannot "
                "be pickled")
        _pickle("image_model", image_model, "define it at module level")
        _pickle("callbacks", self.callbacks, "define callback classes at module level")
        _check_env(env_factory, config)
        self._run: Any = None
        self._final_weights: list[np.ndarray] | None = None
        self._eval_policy: Any = None

    def train(self, nb_steps: int | None = None, nb_trains: int | None = None,
              max_seconds: float | None = None, *,
              on_progress: Callable[[Progress], None] | None = None) -> TrainResult:
        """Trains until the first limit is reached; needs at least one limit.

        Processes start fresh on every call; a later call starts from the latest weights
        (with a new replay and optimizer state).

        Args:
            nb_steps: env steps over all actors.
            nb_trains: learner updates.
            max_seconds: wall-clock seconds, counted from the call (start-up included).
            on_progress: called in the parent about ten times a second with a `Progress`.

        Returns:
            A `TrainResult`. After Ctrl-C it returns normally with `stop_reason`
            "interrupted" (the latest weights are kept).

        Raises:
            R2D2ProcessError: the learner failed, or an actor died more than
                `max_actor_restarts` times; the message holds the child's traceback.
        """
        for name, value in (("nb_steps", nb_steps), ("nb_trains", nb_trains)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
        if max_seconds is not None and not (max_seconds > 0 and math.isfinite(max_seconds)):
            raise ValueError(f"max_seconds must be a positive number, got {max_seconds!r}")
        if nb_steps is None and nb_trains is None and max_seconds is None:
            raise ValueError("give at least one limit: nb_steps, nb_trains or max_seconds")
        if self._run is not None:
            raise RuntimeError("train() is already running")
        call_hooks(self.callbacks, "on_r2d2_train_begin")
        self._run = Supervisor(self, multiprocessing.get_context("spawn"), nb_steps,
                               nb_trains, max_seconds, on_progress)
        try:
            result = self._run.execute()
        finally:
            if self._run.final_weights is not None:
                self._final_weights = self._run.final_weights
            self._run = None
        call_hooks(self.callbacks, "on_r2d2_train_end")
        return result

    def latest_weights(self) -> list[np.ndarray] | None:
        """The learner's latest published weights (None before any `train`)."""
        if self._run is not None and self._run.segment is not None:
            return self._run.read_weights() or self._final_weights
        return self._final_weights

    def create_test_agent(self, **agent_kwargs: Any) -> Any:
        """An `R2D2Agent` (compiled) holding the learner's latest weights.

        Args:
            **agent_kwargs: extra `R2D2Agent` arguments (e.g. `processor`).

        Raises:
            RuntimeError: if no weights exist yet (call `train` first).
        """
        weights = self.latest_weights()
        if weights is None:
            raise RuntimeError("no learner weights yet: call train() first")
        from r2d2_agent.agent import R2D2Agent

        agent_kwargs.setdefault("observation_dtype", self.observation_dtype)
        agent = R2D2Agent(self.config, self.image_model, **agent_kwargs)
        agent.compile()
        agent.learner.set_weights(weights)
        agent.sync_actor()
        return agent

    def request_stop(self) -> None:
        """Asks a running `train` to stop at its next poll (stop_reason "requested").

        Safe to call from `on_progress` or from another thread.
        """
        if self._run is not None:
            self._run.stop_requested = True

    def evaluate(self, nb_episodes: int = 10, env: Any = None, seed: int | None = None
                 ) -> list[float]:
        """Plays episodes in this process with the latest weights and `config.test_epsilon`.

        With the numpy policy (value inputs) this needs no TensorFlow, so it can run from
        `on_progress` while training goes on.

        Args:
            nb_episodes: episodes to play.
            env: a gymnasium env to play in (kept open); a new one from the factory if None.
            seed: seed of the first reset.

        Returns:
            The episode returns.
        """
        from r2d2_agent.actor import make_policy
        from r2d2_agent.runners import play_episodes

        weights = self.latest_weights()
        if weights is None:
            raise RuntimeError("no learner weights yet: call train() first")
        if self._eval_policy is None:
            self._eval_policy = make_policy(self.config, self.image_model,
                                            self.use_numpy_policy)
        self._eval_policy.set_weights(weights)
        own_env = env is None
        env = self.env_factory() if own_env else env
        try:
            return play_episodes(self.config, self._eval_policy, env, nb_episodes,
                                 epsilon=self.config.test_epsilon, seed=seed)
        finally:
            if own_env:
                env.close()

    def close(self) -> None:
        """Releases everything (`train` already does on return; kept for `with`)."""
        if self._run is not None:
            self._run.close()
            self._run = None

    def __enter__(self) -> R2D2Manager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pickle(name: str, value: Any, hint: str) -> bytes:
    try:
        return pickle.dumps(value)
    except Exception as exc:
        raise TypeError(f"{name} must be picklable to reach the child processes ({hint}): "
                        f"{type(exc).__name__}: {exc}") from exc


def _check_env(env_factory: Callable[[], Any], config: R2D2Config) -> None:
    """Builds one env in the parent and checks its spaces against the config."""
    import gymnasium

    from r2d2_agent.env_checks import check_env_matches_config

    env = env_factory()
    try:
        if not isinstance(env, gymnasium.Env):
            raise TypeError(f"env_factory must return a gymnasium.Env, got "
                            f"{type(env).__name__}")
        check_env_matches_config(env.observation_space, env.action_space, config)
    finally:
        env.close()
