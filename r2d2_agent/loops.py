"""The episode loop behind `R2D2Agent.fit` and `R2D2Agent.test`.

It follows keras-rl's callback protocol and log keys (so keras-rl's `FileLogger`,
`TrainEpisodeLogger`, `TrainIntervalLogger`, `TestLogger` and `Visualizer` work), counts
with Python ints, and passes gymnasium's `terminated`/`truncated` to the agent separately.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from r2d2_agent.compat import keras, rl_callbacks

logger = logging.getLogger(__name__)


def _callback_list(agent: Any, env: Any, callbacks: list[Any] | None, verbose: int,
                   visualize: bool, log_interval: int, params: dict[str, Any]
                   ) -> tuple[Any, keras.callbacks.History]:
    callbacks = list(callbacks or [])
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


def _env_step(agent: Any, env: Any, action: int, repeat: int, callbacks: Any
              ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """Steps the env `repeat` times (or to the episode end), summing rewards."""
    total, info = 0.0, {}
    observation, terminated, truncated = None, False, False
    env_action = agent.processor.process_action(action) if agent.processor else action
    for _ in range(repeat):
        callbacks.on_action_begin(action)
        observation, reward, done, info = env.step(env_action)
        if agent.processor is not None:
            observation, reward, done, info = agent.processor.process_step(
                observation, reward, done, info)
        callbacks.on_action_end(action)
        total += float(reward)
        terminated = bool(info.get("terminated", done))
        truncated = bool(info.get("truncated", False)) and not terminated
        if done:
            break
    return observation, total, terminated, truncated, info


def _reset(agent: Any, env: Any, nb_max_start_steps: int, start_step_policy: Any) -> Any:
    observation = env.reset()
    if agent.processor is not None:
        observation = agent.processor.process_observation(observation)
    if nb_max_start_steps:
        for _ in range(int(np.random.randint(nb_max_start_steps))):
            action = (start_step_policy(observation) if start_step_policy is not None
                      else env.action_space.sample())
            observation, _, done, _ = env.step(action)
            if agent.processor is not None:
                observation = agent.processor.process_observation(observation)
            if done:
                logger.warning("episode ended during its %d random start steps; "
                               "consider lowering nb_max_start_steps", nb_max_start_steps)
                observation = env.reset()
    return observation


def run_episodes(agent: Any, env: Any, nb_steps: int | None, nb_episodes: int | None,
                 action_repetition: int, callbacks: list[Any] | None, verbose: int,
                 visualize: bool, log_interval: int, nb_max_episode_steps: int | None,
                 nb_max_start_steps: int, start_step_policy: Any
                 ) -> keras.callbacks.History:
    """Runs episodes until `nb_steps` env steps or `nb_episodes` episodes are done.

    Returns:
        A Keras `History` with `episode_reward`, `nb_episode_steps`, `nb_steps` per episode.
    """
    if action_repetition < 1:
        raise ValueError(f"action_repetition must be >= 1, got {action_repetition}")
    if nb_steps is not None and nb_steps < 1:
        raise ValueError(f"nb_steps must be >= 1, got {nb_steps}")
    if nb_episodes is not None and nb_episodes < 1:
        raise ValueError(f"nb_episodes must be >= 1, got {nb_episodes}")
    params = {"nb_steps": nb_steps} if nb_steps is not None else {"nb_episodes": nb_episodes}
    callback_list, history = _callback_list(agent, env, callbacks, verbose, visualize,
                                            log_interval, params)
    agent._on_train_begin() if agent.training else agent._on_test_begin()
    callback_list.on_train_begin()
    steps, episode, did_abort = 0, 0, False
    try:
        while (nb_steps is None or steps < nb_steps) and (
                nb_episodes is None or episode < nb_episodes):
            callback_list.on_episode_begin(episode)
            agent.reset_states()
            observation = _reset(agent, env, nb_max_start_steps, start_step_policy)
            episode_reward, episode_step, done = 0.0, 0, False
            while not done and (nb_steps is None or steps < nb_steps):
                callback_list.on_step_begin(episode_step)
                action = agent.forward(observation)
                observation, reward, terminated, truncated, info = _env_step(
                    agent, env, action, action_repetition, callback_list)
                if (nb_max_episode_steps and episode_step + 1 >= nb_max_episode_steps
                        and not terminated):
                    truncated = True
                done = terminated or truncated
                steps += 1
                metrics = agent.backward(reward, terminated, truncated=truncated,
                                         next_observation=observation)
                episode_reward += reward
                callback_list.on_step_end(episode_step, {
                    "action": action, "observation": observation, "reward": reward,
                    "metrics": metrics, "episode": episode, "info": info})
                episode_step += 1
            if done:
                # keras-rl's convention: total steps while training, the episode's in tests
                callback_list.on_episode_end(episode, {
                    "episode_reward": episode_reward, "nb_episode_steps": episode_step,
                    "nb_steps": steps if agent.training else episode_step})
                episode += 1
    except KeyboardInterrupt:
        did_abort = True
        logger.warning("interrupted after %d env steps; stopping cleanly", steps)
    callback_list.on_train_end(logs={"did_abort": did_abort})
    agent._on_train_end() if agent.training else agent._on_test_end()
    return history
