"""`R2D2Callback`: keras-rl's callback hooks plus hooks for the distributed roles.

A callback attached to an `R2D2Agent` receives keras-rl's hooks (`on_episode_end`,
`on_step_end`, ...). Attached to an `R2D2Manager`, it receives the hooks of the manager
(train begin/end), the learner and each actor. Those run in different processes: a
callback object is pickled into every child, so state it keeps in one role is not seen
by another.

A hook can end the whole run cleanly with `self.request_stop(reason)`: the agent's `fit`
stops before its next step; in a manager run, from any process, the parent stops every
process and `train` returns with `stop_reason == "callback"`.

A hook can log a metric of its own with `self.log_metric(name, value)`, in any process:
the value, stamped with the process and the run's env steps (and learner updates), goes
to the run directory (`RunLogCallback`: `metrics-<process>.jsonl`) and to TensorBoard
(`custom/<name>`), and `python -m r2d2_agent.plot RUN_DIR --metric <name>` draws it.

`R2D2Callback` does not subclass keras-rl's `Callback` (whose module imports TensorFlow):
it has the same methods and attributes (`model`, `params`, `env`, `set_model`,
`set_params`, the hooks), so subclassing it keeps the manager's parent and numpy actors
free of TensorFlow, and `R2D2Agent.fit`/`test` hand it to keras-rl's `CallbackList`
through an adapter. keras-rl's own callbacks (`FileLogger`, ...) work on the agent as
they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["R2D2Callback"]


class R2D2Callback:
    """Base class: override the hooks you need; every hook does nothing by default.

    Attributes:
        model: The `R2D2Agent` during its `fit`/`test` (keras-rl's convention); None in
            the manager's processes.
        params: keras-rl's run parameters (`nb_steps` or `nb_episodes`) during `fit`/`test`.
        env: The env during `fit`/`test`.
    """

    model: Any = None
    params: dict[str, Any] | None = None
    env: Any = None
    _stop_requester: Callable[[str], None] | None = None
    _metric_logger: Callable[[str, float], None] | None = None

    def __init__(self) -> None:
        self.model = None
        self.params = {}

    # --- stopping the run (any process) ---
    def request_stop(self, reason: str = "callback") -> None:
        """Ends the run cleanly: `R2D2Agent.fit`/`test` before the next step, or the
        whole `R2D2Manager.train` (from the parent, the learner or any actor).

        Args:
            reason: Why, for the logs and `TrainResult.stop_detail`.

        Raises:
            RuntimeError: Outside a running `fit`, `test` or `train`.
        """
        if self._stop_requester is None:
            raise RuntimeError(
                "request_stop() works from the hooks of a running fit(), test() or "
                "R2D2Manager.train()"
            )
        self._stop_requester(str(reason))

    def set_stop_requester(self, requester: Callable[[str], None] | None) -> None:
        """Called by whoever runs the hooks with the function that ends the run (None
        when the run is over); not for users."""
        self._stop_requester = requester

    # --- metrics of your own (any process) ---
    def log_metric(self, name: str, value: float) -> None:
        """Logs `value` under `name` from any hook, in any process (as SB3's
        `logger.record`).

        The value is stamped with the process ("agent", "parent", "learner",
        "actor-<i>"), the run's env steps and the learner updates, and goes to every
        callback of this process that writes metrics: `RunLogCallback` appends it to
        `RUN_DIR/metrics-<process>.jsonl` and writes it to TensorBoard as
        `custom/<name>` (x: env steps), as does `TensorBoardCallback`. Without either
        attached, it goes nowhere (a warning says so once).

        Args:
            name: The metric's name, e.g. "q_spread" (shown as `custom/q_spread`).
            value: A real number.

        Raises:
            RuntimeError: Outside a running `fit`, `test` or `train`.
            ValueError: If `name` is empty.
            TypeError: If `value` is not a real number.

        Example:
            >>> class ReplayFill(R2D2Callback):
            ...     def on_r2d2_learner_train_end(self, learner):  # in the learner
            ...         if learner.updates % 100 == 0:
            ...             self.log_metric("replay_size", len(learner.replay))
            >>> ReplayFill().log_metric("replay_size", 1.0)  # outside a run
            Traceback (most recent call last):
            ...
            RuntimeError: log_metric() works from the hooks of a running fit(), ...
        """
        if self._metric_logger is None:
            raise RuntimeError(
                "log_metric() works from the hooks of a running fit(), test() or "
                "R2D2Manager.train() (after the run: R2D2Manager.log_metric)"
            )
        self._metric_logger(name, value)

    @property
    def metrics_written(self) -> bool:
        """Whether `log_metric` writes anywhere now: in a running `fit`, `test` or
        `train` with a `RunLogCallback`, a `TensorBoardCallback` or another metric writer
        attached in this process."""
        return bool(getattr(self._metric_logger, "has_sinks", False))

    def set_metric_logger(self, metric_logger: Callable[[str, float], None] | None) -> None:
        """Called by whoever runs the hooks with this process's metric logger (None when
        the run is over); not for users."""
        self._metric_logger = metric_logger

    def __getstate__(self) -> dict[str, Any]:
        # The requester, the logger, the agent and the env belong to the process that set them.
        state = dict(self.__dict__)
        for name in ("_stop_requester", "_metric_logger", "model", "env"):
            state.pop(name, None)
        return state

    # --- keras-rl's callback protocol (R2D2Agent.fit / test) ---
    def set_model(self, model: Any) -> None:
        """keras-rl: the agent this callback runs on."""
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        """keras-rl: the run's parameters."""
        self.params = params

    def _set_env(self, env: Any) -> None:
        """keras-rl: the env of the run."""
        self.env = env

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """`fit`/`test` starts."""

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """`fit`/`test` ended (`logs["stop_reason"]`, `logs["did_abort"]`)."""

    def on_episode_begin(self, episode: int, logs: dict[str, Any] | None = None) -> None:
        """An episode of `fit`/`test` starts."""

    def on_episode_end(self, episode: int, logs: dict[str, Any] | None = None) -> None:
        """An episode of `fit`/`test` ended (`episode_reward`, `nb_episode_steps`, `nb_steps`)."""

    def on_step_begin(self, step: int, logs: dict[str, Any] | None = None) -> None:
        """Before an agent step of `fit`/`test`."""

    def on_step_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        """After an agent step of `fit`/`test` (`action`, `observation`, `reward`, `metrics`,
        `episode`, `info`)."""

    def on_action_begin(self, action: int, logs: dict[str, Any] | None = None) -> None:
        """Before an action is sent to the env."""

    def on_action_end(self, action: int, logs: dict[str, Any] | None = None) -> None:
        """After the env took the action."""

    # --- manager (parent process) ---
    def on_r2d2_train_begin(self) -> None:
        """The manager is about to start its processes."""

    def on_r2d2_train_end(self) -> None:
        """The manager's run ended (all processes stopped)."""

    # --- learner process ---
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        """The learner is built (weights can be loaded here)."""

    def on_r2d2_learner_end(self, learner: Any) -> None:
        """The learner is about to stop (weights can be saved here)."""

    def on_r2d2_learner_train_begin(self, learner: Any) -> None:
        """Before one learner update."""

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        """After one learner update (`learner.updates` counts them)."""

    # --- actor processes ---
    def on_r2d2_actor_begin(self, actor_index: int, runner: Any) -> None:
        """Actor `actor_index` is built."""

    def on_r2d2_actor_episode_end(self, actor_index: int, runner: Any, episode: Any) -> None:
        """Actor `actor_index` finished an episode (`episode`: an `EpisodeResult` with
        `episode_return`, `episode_steps`; `runner.steps` is the actor's env steps,
        `runner.epsilon` its exploration rate)."""

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        """Actor `actor_index` is about to stop."""
