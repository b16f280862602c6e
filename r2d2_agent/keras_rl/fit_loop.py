"""keras-rl's callback protocol around `EpisodeLoop`, for `R2D2Agent.fit` and `test`.

keras-rl's loggers and callbacks (`FileLogger`, `TrainEpisodeLogger`, `TrainIntervalLogger`,
`TestLogger`, `Visualizer`) see the hooks and log keys of keras-rl's own `fit`/`test`;
the episodes themselves run in the one `EpisodeLoop` of `r2d2_agent.roles` (or, with
N envs, in its `VectorEpisodeLoop`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from r2d2_agent.compat import keras, rl_callbacks
from r2d2_agent.envs.gymnasium_env import GymnasiumEnv
from r2d2_agent.roles.episode_loop import EpisodeLoop, EpisodeObserver, EpisodeResult, Transition
from r2d2_agent.roles.hooks import MetricLogger, bind_metric_logger, bind_stop_requester
from r2d2_agent.roles.vector_loop import VectorEpisodeLoop, VectorObserver

__all__ = [
    "KerasRLAdapter",
    "KerasRLCallbacks",
    "KerasRLVectorCallbacks",
    "as_keras_rl_callback",
    "run_keras_rl_loop",
    "run_keras_rl_vector_loop",
]

logger = logging.getLogger(__name__)


def step_logs(transition: Transition, metrics: Any, episode: int | None) -> dict[str, Any]:
    """keras-rl's `on_step_end` logs of one env step (Gymnasium's `terminated` and
    `truncated` kept apart in its `info`)."""
    info = {
        **transition.info,
        "terminated": transition.terminated,
        "truncated": transition.truncated,
    }
    return {
        "action": transition.action,
        "observation": transition.observation,
        "reward": transition.reward,
        "metrics": metrics,
        "episode": episode,
        "info": info,
    }


class KerasRLCallbacks(EpisodeObserver):
    """Forwards the loop's hooks to a keras-rl `CallbackList`, with keras-rl's log keys.

    Args:
        callbacks: The keras-rl callback list.
        agent: The agent (for its latest metrics and whether it is training).
    """

    def __init__(self, callbacks: Any, agent: Any) -> None:
        self._callbacks = callbacks
        self._agent = agent
        self._episode = 0

    def on_episode_begin(self, episode: int) -> None:
        self._episode = episode
        self._callbacks.on_episode_begin(episode)

    def on_step_begin(self, episode_step: int) -> None:
        self._callbacks.on_step_begin(episode_step)

    def on_action_begin(self, action: int) -> None:
        self._callbacks.on_action_begin(action)

    def on_action_end(self, action: int) -> None:
        self._callbacks.on_action_end(action)

    def on_step_end(self, episode_step: int, transition: Transition) -> None:
        logs = step_logs(transition, self._agent.last_metrics, self._episode)
        self._callbacks.on_step_end(episode_step, logs)

    def on_episode_end(self, result: EpisodeResult) -> None:
        # keras-rl's convention: total steps while training, the episode's own in tests.
        nb_steps = result.total_steps if self._agent.training else result.episode_steps
        logs = {
            "episode_reward": result.episode_return,
            "nb_episode_steps": result.episode_steps,
            "nb_steps": nb_steps,
        }
        self._callbacks.on_episode_end(result.episode, logs)


class KerasRLVectorCallbacks(VectorObserver):
    """Forwards `VectorEpisodeLoop`'s hooks to a keras-rl `CallbackList`, per env.

    Every env's episode is an episode of keras-rl's protocol, numbered in the order the
    episodes begin (so episodes of several envs overlap): `on_episode_begin(episode)`
    before its first step, `on_episode_end(episode, logs)` after its last, with `env`
    (the env's index) in the logs beside keras-rl's keys. The step hooks run once per env
    step, not once per batched step, so that keras-rl's loggers count env steps:
    after a batched step of the N envs, for each env in order, `on_step_begin`,
    `on_action_begin`, `on_action_end` and `on_step_end` (its logs hold `env` too, and
    the training metrics as they are after that env step).

    Args:
        callbacks: The keras-rl callback list.
        agent: The agent (for its latest metrics).
        num_envs: N.
    """

    def __init__(self, callbacks: Any, agent: Any, num_envs: int) -> None:
        self._callbacks = callbacks
        self._agent = agent
        self._episodes = 0  # episodes begun
        self._episode_of: list[int | None] = [None] * num_envs  # each env's running one

    def on_step_begin(self) -> None:
        for j, episode in enumerate(self._episode_of):
            if episode is None:
                self._episode_of[j] = self._episodes
                self._callbacks.on_episode_begin(self._episodes, logs={"env": j})
                self._episodes += 1

    def on_env_step_end(self, env: int, episode_step: int, transition: Transition) -> None:
        callbacks = self._callbacks
        callbacks.on_step_begin(episode_step, logs={"env": env})
        callbacks.on_action_begin(transition.action, logs={"env": env})
        callbacks.on_action_end(transition.action, logs={"env": env})
        logs = step_logs(transition, self._agent.last_metrics, self._episode_of[env])
        callbacks.on_step_end(episode_step, {**logs, "env": env})

    def on_env_episode_end(self, env: int, result: EpisodeResult) -> None:
        logs = {
            "episode_reward": result.episode_return,
            "nb_episode_steps": result.episode_steps,
            "nb_steps": result.total_steps,
            "env": env,
        }
        episode = self._episode_of[env]
        self._episode_of[env] = None
        self._callbacks.on_episode_end(episode, logs)


class KerasRLAdapter(rl_callbacks.Callback):
    """Presents a callback that is not a keras-rl `Callback` to keras-rl's `CallbackList`.

    `R2D2Callback` does not subclass keras-rl's `Callback` (that would import TensorFlow
    into every process a callback reaches), and a duck-typed callback need not have every
    method `CallbackList` calls. The adapter forwards `set_model`, `set_params`, the env
    and each hook the callback has; the callback's `self.model` is the agent, as in
    keras-rl.

    Args:
        callback: The wrapped callback.
    """

    def __init__(self, callback: Any) -> None:
        super().__init__()
        self.callback = callback

    def _forward(self, name: str, *args: Any, **kwargs: Any) -> None:
        method = getattr(self.callback, name, None)
        if method is not None:
            method(*args, **kwargs)

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self._forward("set_model", model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        self._forward("set_params", params)

    def _set_env(self, env: Any) -> None:
        super()._set_env(env)
        self._forward("_set_env", env)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_train_begin", logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_train_end", logs)

    def on_episode_begin(self, episode: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_episode_begin", episode, logs=logs)

    def on_episode_end(self, episode: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_episode_end", episode, logs=logs)

    def on_step_begin(self, step: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_step_begin", step, logs=logs)

    def on_step_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_step_end", step, logs=logs)

    def on_action_begin(self, action: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_action_begin", action, logs=logs)

    def on_action_end(self, action: int, logs: dict[str, Any] | None = None) -> None:
        self._forward("on_action_end", action, logs=logs)


def as_keras_rl_callback(callback: Any) -> Any:
    """`callback` itself if it is a keras-rl or Keras `Callback`, else a `KerasRLAdapter`."""
    if isinstance(callback, (rl_callbacks.Callback, keras.callbacks.Callback)):
        return callback
    return KerasRLAdapter(callback)


class _StopRequests(EpisodeObserver):
    """Ends the loop once someone called `agent.request_stop` (e.g. a callback)."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent

    def should_stop(self) -> bool:
        return self._agent.stop_reason is not None


class _VectorStopRequests(VectorObserver):
    """`_StopRequests` for `VectorEpisodeLoop`."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent

    def should_stop(self) -> bool:
        return self._agent.stop_reason is not None


def _callback_list(
    agent: Any,
    env: Any,
    callbacks: Sequence[Any] | None,
    verbose: int,
    visualize: bool,
    log_interval: int,
    params: dict[str, Any],
) -> tuple[Any, keras.callbacks.History]:
    """keras-rl's callbacks for a run: the user's, the verbose logger, a History."""
    callbacks = [as_keras_rl_callback(callback) for callback in callbacks or []]
    if agent.training:
        if verbose == 1:
            callbacks.append(rl_callbacks.TrainIntervalLogger(interval=log_interval))
        elif verbose > 1:
            callbacks.append(rl_callbacks.TrainEpisodeLogger())
    elif verbose >= 1:
        callbacks.append(rl_callbacks.TestLogger())
    if visualize:
        callbacks.append(rl_callbacks.Visualizer())
    history = keras.callbacks.History()
    callbacks.append(history)
    callback_list = rl_callbacks.CallbackList(callbacks)
    callback_list.set_model(agent)
    callback_list._set_env(env)
    callback_list.set_params(params)
    return callback_list, history


def run_keras_rl_loop(
    agent: Any,
    env: GymnasiumEnv,
    actor: Any,
    *,
    observers: Sequence[EpisodeObserver],
    seed: int | None,
    nb_steps: int | None,
    nb_episodes: int | None,
    action_repetition: int,
    callbacks: Sequence[Any] | None,
    verbose: int,
    visualize: bool,
    log_interval: int,
    nb_max_episode_steps: int | None,
    nb_max_start_steps: int,
    start_step_policy: Any,
) -> keras.callbacks.History:
    """Runs `actor` in `env` until `nb_steps` env steps or `nb_episodes` episodes.

    `observers` run before the keras-rl callbacks at every hook (so a step's training
    metrics reach `on_step_end`). Ctrl-C ends the run cleanly (`did_abort` in the logs of
    `on_train_end`). A callback's `request_stop(reason)` (or `agent.request_stop`) ends
    it before the next step (`stop_reason` in the logs of `on_train_end`).

    Returns:
        A Keras `History` with `episode_reward`, `nb_episode_steps`, `nb_steps` per episode.
    """
    loop = EpisodeLoop(
        env.env,
        actor,
        seed=seed,
        action_repeat=action_repetition,
        max_episode_steps=nb_max_episode_steps,
        processor=agent.processor,
        start_steps=nb_max_start_steps,
        start_step_policy=start_step_policy,
    )
    if nb_steps is not None and nb_steps < 1:
        raise ValueError(f"nb_steps must be >= 1, got {nb_steps}")
    if nb_episodes is not None and nb_episodes < 1:
        raise ValueError(f"nb_episodes must be >= 1, got {nb_episodes}")
    params = {"nb_steps": nb_steps} if nb_steps is not None else {"nb_episodes": nb_episodes}
    callback_list, history = _callback_list(
        agent, env, callbacks, verbose, visualize, log_interval, params
    )
    loop.observers = (*observers, KerasRLCallbacks(callback_list, agent), _StopRequests(agent))
    _run_with_callbacks(
        agent,
        callbacks,
        callback_list,
        lambda: loop.run(nb_steps=nb_steps, nb_episodes=nb_episodes),
    )
    return history


def run_keras_rl_vector_loop(
    agent: Any,
    loop: VectorEpisodeLoop,
    *,
    observers: Sequence[VectorObserver],
    nb_steps: int,
    callbacks: Sequence[Any] | None,
    verbose: int,
    log_interval: int,
    continue_episodes: bool = False,
) -> keras.callbacks.History:
    """Trains the actor of `loop` (an `R2D2VectorActor` in N envs) for `nb_steps` env
    steps of all N.

    As `run_keras_rl_loop`, with `VectorEpisodeLoop` stepping the N envs (one batched
    forward pass per step of all N) and `KerasRLVectorCallbacks` presenting each env's
    steps and episodes to the keras-rl callbacks. The limit is checked before each step
    of the N envs, so up to N-1 env steps more may be taken. With `continue_episodes`
    the loop goes on with the episodes its previous run left running
    (`VectorEpisodeLoop.run`); to the callbacks they begin with this run.

    Returns:
        A Keras `History` with `episode_reward`, `nb_episode_steps`, `nb_steps` and `env`
        per episode, in the order the episodes ended.
    """
    if nb_steps < 1:
        raise ValueError(f"nb_steps must be >= 1, got {nb_steps}")
    envs = loop.envs
    callback_list, history = _callback_list(
        agent, envs, callbacks, verbose, False, log_interval, {"nb_steps": nb_steps}
    )
    loop.observers = (
        *observers,
        KerasRLVectorCallbacks(callback_list, agent, envs.num_envs),
        _VectorStopRequests(agent),
    )
    _run_with_callbacks(
        agent,
        callbacks,
        callback_list,
        lambda: loop.run(nb_steps=nb_steps, continue_episodes=continue_episodes),
    )
    return history


def _run_with_callbacks(
    agent: Any, callbacks: Sequence[Any] | None, callback_list: Any, run: Callable[[], Any]
) -> None:
    """Runs `run()` between the agent's and the callbacks' begin and end hooks, with the
    user's callbacks bound to the agent's stop requests and metric logger."""
    agent.stop_reason = None
    user_callbacks = list(callbacks or [])
    bind_stop_requester(user_callbacks, agent.request_stop)
    bind_metric_logger(
        user_callbacks,
        MetricLogger(user_callbacks, "agent", lambda: (agent.step, agent.learner.updates)),
    )
    try:
        if agent.training:
            agent._on_train_begin()
        else:
            agent._on_test_begin()
        callback_list.on_train_begin()
        did_abort = False
        try:
            run()
        except KeyboardInterrupt:
            did_abort = True
            logger.warning("interrupted; stopping cleanly")
        callback_list.on_train_end(logs={"did_abort": did_abort, "stop_reason": agent.stop_reason})
    finally:
        bind_stop_requester(user_callbacks, None)
        bind_metric_logger(user_callbacks, None)
    if agent.training:
        agent._on_train_end()
    else:
        agent._on_test_end()
