"""`R2D2Manager`: R2D2 with N actor processes and one learner process.

The manager validates its inputs once, in the parent, into a `RunSpec` (before any child
starts, and without importing TensorFlow). `train` hands that spec to a backend: the
multiprocessing `Supervisor` (the default, one machine) or, with `backend="ray"`, the
`RaySupervisor` (Ray actors anywhere in a Ray cluster; see
`r2d2_agent.distributed.ray_backend`). The multiprocessing backend starts the processes
with the `spawn` method:

* the learner builds the network and reports its weights layout; the parent creates the
  shared-memory segment (so it can always unlink it) and hands it to the learner, which
  publishes weights there; actors read them every `actor_sync_interval` env steps without
  pickling;
* actor i acts in its own env (seed = seed + i, Ape-X epsilon_i) and sends sequences
  through its own bounded pipe to the learner;
* the parent supervises: progress, limits, restarts of dead actors, the learner's errors,
  Ctrl-C, and a shutdown that leaves no process, no pipe and no segment behind.

`docs/architecture.md` draws the processes and what crosses each boundary. Use the manager
under `if __name__ == "__main__":` (spawned children import the main module).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import check_compatible, read_checkpoint
from r2d2_agent.config import R2D2Config
from r2d2_agent.distributed.mp.supervisor import Supervisor
from r2d2_agent.distributed.ray_backend import RayOptions, require_ray
from r2d2_agent.distributed.reports import MAIN_GUARD_HINT, Progress, TrainResult
from r2d2_agent.distributed.spec import RunOptions, RunSpec, TrainLimits
from r2d2_agent.envs.checks import check_env_matches_config, check_env_reset
from r2d2_agent.networks.weights_io import split_published
from r2d2_agent.replay.sizing import check_replay_fits
from r2d2_agent.roles.builder import R2D2Builder
from r2d2_agent.roles.episode_loop import play_episodes
from r2d2_agent.roles.hooks import (
    MetricLogger,
    bind_metric_logger,
    bind_stop_requester,
    call_hooks,
    warn_skipped_keras_rl_hooks,
)

__all__ = ["R2D2Manager"]

logger = logging.getLogger(__name__)

BACKENDS = ("multiprocessing", "ray")
"""The manager's backends."""


class R2D2Manager:
    """Distributed R2D2 on one machine: actor processes, a learner process, shared weights.

    Args:
        env_factory: Picklable zero-argument callable returning a Gymnasium env (e.g.
            `functools.partial(gymnasium.make, "CartPole-v1")`).
        config: The agent's configuration; its `input_shape` and `nb_actions` must match
            the env's spaces.
        actor_num: Number of actor processes (>= 1).
        image_model: Picklable `ImageModel` for image inputs.
        callbacks: Picklable callbacks (`R2D2Callback` hooks; duck typing works): the
            train hooks run in the parent, the learner hooks in the learner, the actor
            hooks in every actor (each process gets its own copy). keras-rl's hooks
            (`on_episode_end`, ...) run in `R2D2Agent.fit`/`test` only: a callback that
            implements one without its manager counterpart gets a `UserWarning` here,
            naming the `on_r2d2_*` hook to use.
        max_actor_restarts: Restarts allowed per actor index after it dies; one more
            death stops the run with `R2D2ProcessError`.
        actors_on_cpu: Hide GPUs from actor processes, so N actors do not each reserve GPU
            memory (the learner alone uses the GPU).
        use_numpy_policy: Act with the numpy forward pass (no TensorFlow in actors);
            None: whenever the network allows it (value inputs, no image model).
        observation_dtype: Storage dtype of observations; None stores images as uint8 and
            values as float32.
        rate_limit: Keep learner updates and received env steps in a fixed ratio (see
            `env_steps_per_update`); False lets both sides run free.
        env_steps_per_update: Env steps (all actors) per learner update when rate limiting;
            None means `config.train_interval`, the single-process agent's ratio.
        ratio_tolerance: Allowed drift from that ratio, in learner updates.
        publish_interval: Learner updates between weight publications.
        send_batch_size: Sequences an actor gathers before one send.
        progress: Show a progress bar (tqdm; it stays quiet when stderr is not a TTY).
        shutdown_timeout: Seconds children get to stop before they are killed (a learner
            still writing its final checkpoint gets more while it shows signs of life).
        stall_timeout: The stall watchdog: seconds without any sign of life from a child
            (its loop's heartbeat) before it counts as frozen or deadlocked. A stalled
            actor is killed and restarted like a dead one (counting against
            `max_actor_restarts`); a stalled learner is killed and the run stops with
            `R2D2ProcessError` naming it and how long it was silent. Long legitimate work
            (start-up, the first trace, callback hooks such as checkpoints that write the
            replay, sends held by back-pressure) never counts as silence. None disables
            the watchdog.
        tf_verbose: Show TensorFlow's native start-up logs (CUDA, absl, oneDNN) in the
            children; None (default) hides them unless `R2D2_TF_VERBOSE=1` is set.
        backend: "multiprocessing" (processes on this machine) or "ray" (Ray actors in a
            Ray cluster; needs `pip install "r2d2-agent[ray]"`).
        ray_address: With `backend="ray"`: the cluster to join (e.g. "auto" or
            "ray://head:10001"); None uses the Ray already initialised in this process,
            else `RAY_ADDRESS`, else a cluster `ray start` made on this machine, else
            starts a local Ray for the run. Ray the manager connected is disconnected
            (and a local Ray it started is stopped) when `train` returns.
        ray_options: With `backend="ray"`: placement and pacing (`RayOptions`: CPUs per
            actor, the learner's GPUs, the experience back-pressure bound, ...).

    Raises:
        TypeError: On an unpicklable factory, image model or callback, a factory that is
            not callable or does not return a Gymnasium env, or a config that is not an
            `R2D2Config`; before any process starts.
        ValueError: On invalid options, an env whose spaces do not fit the config, an env
            that fails in `reset()` (reset once here, as every actor will; the env's
            exception is chained), or a replay larger than the machine's available memory
            (naming `memory_capacity`, the estimate and the available memory); before any
            process starts.
        ImportError: `backend="ray"` without Ray installed (the message says what to
            install).
    """

    def __init__(
        self,
        env_factory: Callable[[], Any],
        config: R2D2Config,
        actor_num: int = 1,
        image_model: Any = None,
        callbacks: Sequence[Any] | None = None,
        *,
        max_actor_restarts: int = 3,
        actors_on_cpu: bool = True,
        use_numpy_policy: bool | None = None,
        observation_dtype: Any = None,
        rate_limit: bool = True,
        env_steps_per_update: float | None = None,
        ratio_tolerance: float = 16.0,
        publish_interval: int = 10,
        send_batch_size: int = 4,
        progress: bool = True,
        shutdown_timeout: float = 10.0,
        stall_timeout: float | None = 300.0,
        tf_verbose: bool | None = None,
        backend: str = "multiprocessing",
        ray_address: str | None = None,
        ray_options: RayOptions | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend != "ray" and (ray_address is not None or ray_options is not None):
            raise ValueError(
                f"ray_address and ray_options need backend='ray', got backend={backend!r}"
            )
        if ray_options is not None and not isinstance(ray_options, RayOptions):
            raise TypeError(f"ray_options must be a RayOptions, got {type(ray_options).__name__}")
        if backend == "ray":
            require_ray()
        self.backend = backend
        self.ray_address = ray_address
        self.ray_options = (ray_options or RayOptions()) if backend == "ray" else None
        if not isinstance(config, R2D2Config):
            raise TypeError(f"config must be an R2D2Config, got {type(config).__name__}")
        options = RunOptions(
            max_actor_restarts=max_actor_restarts,
            actors_on_cpu=actors_on_cpu,
            rate_limit=rate_limit,
            env_steps_per_update=env_steps_per_update,
            ratio_tolerance=ratio_tolerance,
            publish_interval=publish_interval,
            send_batch_size=send_batch_size,
            progress=progress,
            shutdown_timeout=shutdown_timeout,
            stall_timeout=stall_timeout,
            tf_verbose=tf_verbose,
        )
        builder = R2D2Builder(config, image_model, observation_dtype, use_numpy_policy)
        self.spec = RunSpec(
            env_factory=env_factory,
            builder=builder,
            nb_actors=actor_num,
            callbacks=tuple(callbacks or ()),
            options=options,
            log_level=logging.getLogger("r2d2_agent").getEffectiveLevel(),
        )
        _check_env(env_factory, config, builder.observation_dtype)
        check_replay_fits(config, builder.observation_dtype)  # the learner's, before it starts
        warn_skipped_keras_rl_hooks(self.spec.callbacks, stacklevel=2)
        self._run: Any = None  # a Supervisor or a RaySupervisor while `train` runs
        self._counts: tuple[int | None, int | None] = (None, None)  # env steps, updates
        self._metrics = MetricLogger(self.spec.callbacks, "parent", lambda: self._counts)
        self._final_weights: list[np.ndarray] | None = None
        self._eval_policy: Any = None

    @property
    def config(self) -> R2D2Config:
        """The agent's configuration."""
        return self.spec.config

    @property
    def actor_num(self) -> int:
        """Number of actor processes."""
        return self.spec.nb_actors

    @property
    def env_factory(self) -> Callable[[], Any]:
        """The env factory every actor builds its env from."""
        return self.spec.env_factory

    @property
    def callbacks(self) -> list[Any]:
        """The callbacks (each process works on its own copy)."""
        return list(self.spec.callbacks)

    def train(
        self,
        nb_steps: int | None = None,
        nb_trains: int | None = None,
        max_seconds: float | None = None,
        *,
        on_progress: Callable[[Progress], None] | None = None,
        resume_from: str | os.PathLike[str] | None = None,
    ) -> TrainResult:
        """Trains until the first limit is reached; needs at least one limit.

        Processes start fresh on every call; a later call starts from the latest weights
        (with a new replay and optimizer state), unless `resume_from` names a checkpoint:
        then the run continues from it (weights, optimizer state, env steps per actor,
        updates, episodes) and `nb_steps`/`nb_trains` are totals that include the
        checkpoint's counts. The replay continues too if the checkpoint holds one
        (`CheckpointCallback(save_replay=True)`); otherwise it refills first.

        Args:
            nb_steps: Env steps over all actors.
            nb_trains: Learner updates.
            max_seconds: Wall-clock seconds, counted from the call (start-up included).
            on_progress: Called in the parent about ten times a second with a `Progress`
                (with Ray: once per `RayOptions.report_interval`, 0.2 s by default).
            resume_from: A checkpoint file (`CheckpointCallback`), or a directory of them
                (its latest is used).

        Returns:
            A `TrainResult`. After Ctrl-C it returns normally with `stop_reason`
            "interrupted" (the latest weights are kept); after SIGTERM or SIGHUP, with
            "sigterm" or "sighup", once the learner wrote its final checkpoint.

        Raises:
            ValueError: On invalid limits, before any process starts.
            RuntimeError: If called while a child process imports the main module (a
                script without the `if __name__ == "__main__":` guard); the parent's
                `train` then fails with `R2D2ProcessError` saying to add the guard.
            CheckpointError: If `resume_from` is missing (`MissingCheckpointError`),
                truncated or corrupted (`CorruptCheckpointError`) or written for another
                network (`IncompatibleCheckpointError`, naming the fields); before any
                process starts.
            R2D2ProcessError: The learner failed or stalled (`stall_timeout`), or an actor
                died or stalled more than `max_actor_restarts` times; the message holds
                the child's traceback.
        """
        _check_not_in_a_spawned_import()
        limits = TrainLimits(nb_steps=nb_steps, nb_trains=nb_trains, max_seconds=max_seconds)
        if self._run is not None:
            raise RuntimeError("train() is already running")
        resume = None
        if resume_from is not None:  # read and checked here, before any child starts
            resume = read_checkpoint(resume_from)
            check_compatible(resume, self.config)
            logger.info("resuming from %s", resume.describe())
        if resume is not None:
            self._counts = (resume.counters.env_steps, resume.counters.learner_updates)

        def seen(progress: Progress) -> None:
            self._counts = (progress.env_steps, progress.learner_updates)
            if on_progress is not None:
                on_progress(progress)

        self._run = self._make_backend(limits, seen, resume)
        bind_stop_requester(self.spec.callbacks, self._callback_stop)
        bind_metric_logger(self.spec.callbacks, self._metrics)
        try:
            call_hooks(self.spec.callbacks, "on_r2d2_train_begin")
            result = self._run.run()
        finally:
            if self._run.final_weights is not None:
                self._final_weights = self._run.final_weights
            self._run = None
        self._counts = (result.env_steps, result.learner_updates)
        try:
            call_hooks(self.spec.callbacks, "on_r2d2_train_end")
        finally:
            bind_stop_requester(self.spec.callbacks, None)
            bind_metric_logger(self.spec.callbacks, None)
        return result

    def log_metric(self, name: str, value: float) -> None:
        """Logs a metric of your own from the parent process, e.g. an evaluation's mean
        return from `on_progress` or after `train`; callbacks use `self.log_metric`.

        It is stamped with the process ("parent") and the run's latest env steps and
        learner updates, and goes to the parent's copies of the callbacks that write
        metrics (`RunLogCallback`: `metrics-parent.jsonl`; TensorBoard `custom/<name>`).

        Raises:
            ValueError: If `name` is empty.
            TypeError: If `value` is not a real number.
        """
        self._metrics(name, value)

    def _make_backend(
        self,
        limits: TrainLimits,
        on_progress: Callable[[Progress], None] | None,
        resume: Any,
    ) -> Any:
        """The backend's supervisor for one `train` call."""
        if self.backend == "ray":
            from r2d2_agent.distributed.ray_backend.supervisor import RaySupervisor

            return RaySupervisor(
                self.spec,
                limits,
                initial_weights=self._final_weights,
                on_progress=on_progress,
                resume=resume,
                address=self.ray_address,
                options=self.ray_options,
            )
        return Supervisor(
            self.spec,
            limits,
            initial_weights=self._final_weights,
            on_progress=on_progress,
            resume=resume,
        )

    def _callback_stop(self, reason: str) -> None:
        """`R2D2Callback.request_stop` in the parent process."""
        if self._run is not None:
            self._run.request_stop("callback", f"parent: {reason}")

    def latest_weights(self) -> list[np.ndarray] | None:
        """The greedy policy's latest published weights (the online network's, or their
        average with `config.policy_average_updates`); None before any `train`."""
        published = self._run.read_weights() if self._run is not None else None
        published = published or self._final_weights
        if published is None:
            return None
        return split_published(published, self.config.policy_average_updates > 0)[1]

    def create_test_agent(self, **agent_kwargs: Any) -> Any:
        """An `R2D2Agent` (compiled) holding the learner's latest weights.

        Args:
            **agent_kwargs: Extra `R2D2Agent` arguments (e.g. `processor`).

        Raises:
            RuntimeError: If no weights exist yet (call `train` first).
        """
        weights = self.latest_weights()
        if weights is None:
            raise RuntimeError("no learner weights yet: call train() first")
        from r2d2_agent.keras_rl.agent import R2D2Agent

        builder = self.spec.builder
        agent_kwargs.setdefault("observation_dtype", builder.observation_dtype)
        agent = R2D2Agent(self.config, builder.image_model, **agent_kwargs)
        agent.compile()
        agent.learner.set_weights(weights)
        agent.sync_actor()
        return agent

    def request_stop(self) -> None:
        """Asks a running `train` to stop at its next poll (stop_reason "requested").

        Safe to call from `on_progress` or from another thread.
        """
        if self._run is not None:
            self._run.request_stop()

    def evaluate(
        self,
        nb_episodes: int = 10,
        env: Any = None,
        seed: int | None = None,
        weights: list[np.ndarray] | None = None,
    ) -> list[float]:
        """Plays episodes in this process with the latest weights and `config.test_epsilon`.

        With the numpy policy (value inputs) this needs no TensorFlow, so it can run from
        `on_progress` while training goes on.

        Args:
            nb_episodes: Episodes to play.
            env: A Gymnasium env to play in (kept open); a new one from the factory if None.
            seed: Seed of the first reset.
            weights: Play these weights (e.g. `latest_weights()` kept from a moment of
                the run) instead of the latest ones.

        Returns:
            The episode returns.

        Raises:
            RuntimeError: If no weights are given and none exist yet (call `train` first).
            ValueError: If `env` is None and the env factory returns a vector env.
        """
        weights = self.latest_weights() if weights is None else weights
        if weights is None:
            raise RuntimeError("no learner weights yet: call train() first")
        builder = self.spec.builder
        if self._eval_policy is None:
            self._eval_policy = builder.make_policy()
        self._eval_policy.set_weights(weights)
        actor = builder.make_actor(self._eval_policy, None, self.config.test_epsilon, seed)
        own_env = env is None
        env = self.spec.env_factory() if own_env else env
        if own_env and hasattr(env, "num_envs"):
            env.close()
            raise ValueError(
                "the env factory returns a vector env; pass evaluate(env=...) one env to play"
            )
        try:
            return play_episodes(env, actor, nb_episodes, seed=seed)
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


def _check_env(env_factory: Callable[[], Any], config: R2D2Config, observation_dtype: Any) -> None:
    """Builds one env in the parent, checks its spaces against the config and resets it
    once (an env that fails there would fail in every actor)."""
    import gymnasium

    env = env_factory()
    try:
        if isinstance(env, gymnasium.vector.VectorEnv):  # one actor's envs at once
            if env.num_envs != config.envs_per_actor:
                raise ValueError(
                    f"env_factory returns a vector env of {env.num_envs} envs, but "
                    f"envs_per_actor={config.envs_per_actor}; make them equal"
                )
            check_env_matches_config(
                env.single_observation_space, env.single_action_space, config, observation_dtype
            )
            check_env_reset(env, seed=config.seed)  # its batched space: (num_envs, ...)
            return
        if not isinstance(env, gymnasium.Env):
            raise TypeError(f"env_factory must return a gymnasium.Env, got {type(env).__name__}")
        check_env_matches_config(env.observation_space, env.action_space, config, observation_dtype)
        check_env_reset(env, seed=config.seed)
    finally:
        env.close()


def _check_not_in_a_spawned_import() -> None:
    """Refuses `train` inside a spawned child that is still importing the main module."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "R2D2Manager.train() was called while a new process imported the main module "
            f"({MAIN_GUARD_HINT})"
        )
