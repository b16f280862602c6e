"""`R2D2Agent`: single-process R2D2 as a keras-rl `Agent`.

The agent wires one `R2D2Actor` to one `R2D2Learner` in the same process. Its own
`fit`/`test` loops keep keras-rl's callback protocol (`on_train_begin`, `on_episode_*`,
`on_step_*`, `on_action_*` with the same log keys) but count steps with Python ints
(keras-rl's own `fit` keeps an int16 step counter that wraps after 32,767 steps) and keep
gymnasium's `terminated` and `truncated` apart.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from r2d2_agent.actor import R2D2Actor, make_adder, make_policy
from r2d2_agent.compat import keras, rl_core, set_global_seed
from r2d2_agent.config import R2D2Config
from r2d2_agent.env_checks import check_env_matches_config
from r2d2_agent.envs import as_keras_rl_env
from r2d2_agent.image_models import ImageModel
from r2d2_agent.learner import METRIC_NAMES, R2D2Learner
from r2d2_agent.targets import inverse_rescale

logger = logging.getLogger(__name__)

__all__ = ["R2D2Agent", "make_adder", "save_weights_atomic"]


class R2D2Agent(rl_core.Agent):
    """R2D2 in one process: act, store sequences, train every `train_interval` steps.

    Args:
        config: the agent's configuration.
        image_model: encoder for image inputs (`DQNImageModel` by default).
        processor: an optional keras-rl `Processor` applied to env outputs and actions.
        epsilon: exploration rate while training; `config.epsilon` when None.
        observation_dtype: dtype of stored observations (uint8 saves memory for images).
        use_numpy_policy: act with the numpy forward pass (None: when the net allows it).
    """

    def __init__(self, config: R2D2Config, image_model: ImageModel | None = None,
                 processor: Any = None, epsilon: float | None = None,
                 observation_dtype: Any = np.float32,
                 use_numpy_policy: bool | None = None) -> None:
        super().__init__(processor=processor)
        self.compiled = False
        if config.seed is not None:
            set_global_seed(config.seed)  # weight init, exploration, env resets
        self.config = config
        self.image_model = image_model
        self.learner = R2D2Learner(config, image_model, observation_dtype)
        self.adder = make_adder(config, self.learner.add, observation_dtype)
        policy = make_policy(config, image_model, use_numpy_policy)
        self.train_epsilon = config.epsilon if epsilon is None else float(epsilon)
        self.actor = R2D2Actor(config, policy, self.adder, self.train_epsilon, config.seed)
        self.actor.update(self.learner.get_weights())
        self.step = 0
        self._steps_since_sync = 0
        self._pending: tuple[int, float, bool, bool] | None = None
        self._last_action: int | None = None
        self._metrics = [float("nan")] * len(METRIC_NAMES)

    # keras-rl Agent API -------------------------------------------------------------

    def compile(self, optimizer: Any = None, metrics: list[Any] | None = None) -> None:
        """Sets the optimizer (default: Adam from the config). `metrics` is unused."""
        if optimizer is not None:
            self.learner.optimizer = optimizer
        self.compiled = True

    @property
    def layers(self) -> list[Any]:
        return list(self.learner.online.model.layers)

    @property
    def metrics_names(self) -> list[str]:
        return list(METRIC_NAMES)

    @property
    def model(self) -> keras.Model:
        """The online Keras model."""
        return self.learner.online.model

    def reset_states(self) -> None:
        """Forgets the current episode: recurrent state, frame stack, partial sequence."""
        self.actor.reset_state()
        self._pending = None
        self._last_action = None

    def forward(self, observation: Any) -> int:
        """Chooses an action for `observation` (starting an episode if none is running)."""
        if self._pending is not None:  # backward() left the transition open
            self._complete(observation)
        if not self.actor.episode_started:
            self.actor.observe_first(observation)
        self._last_action = self.actor.select_action()
        return self._last_action

    def backward(self, reward: float, terminal: bool, *, truncated: bool = False,
                 next_observation: Any = None) -> list[float]:
        """Records the reward of the last action and trains when it is time.

        Args:
            reward: reward of the action returned by the last `forward`.
            terminal: whether the episode terminated (no bootstrap).
            truncated: whether it was cut by a time limit (bootstrap from the last state).
            next_observation: the observation after the action; when None it is taken
                from the next `forward` call.

        Returns:
            The metrics (named by `metrics_names`; NaN before the first update).
        """
        if self._last_action is None:
            raise RuntimeError("backward() needs a forward() before it")
        self._pending = (self._last_action, float(reward), bool(terminal), bool(truncated))
        self._last_action = None
        if next_observation is not None:
            self._complete(next_observation)
        if not self.training:
            return self._metrics
        self.step += 1  # training env steps over all fit() calls (a plain int)
        self._steps_since_sync += 1
        if self.step % self.config.train_interval == 0 and self.learner.ready:
            metrics = self.learner.step()
            self._metrics = [metrics[name] for name in METRIC_NAMES]
        if self._steps_since_sync >= self.config.actor_sync_interval:
            self.sync_actor()
        return self._metrics

    def _complete(self, next_observation: Any) -> None:
        action, reward, terminated, truncated = self._pending
        self._pending = None
        if self.training:
            self.actor.observe(action, reward, next_observation, terminated, truncated)
        else:  # evaluation: advance frames only, record nothing
            adder, self.actor.adder = self.actor.adder, None
            try:
                self.actor.observe(action, reward, next_observation, terminated, truncated)
            finally:
                self.actor.adder = adder

    def sync_actor(self) -> None:
        """Copies the learner's weights into the acting policy."""
        self.actor.update(self.learner.get_weights())
        self._steps_since_sync = 0

    def compute_q_values(self, observation: Any) -> np.ndarray:
        """Q-values of one observation in return units, from the current recurrent state.

        The recurrent state and the frame stack are not advanced.
        """
        q = self.actor.q_values(observation)
        return inverse_rescale(q) if self.config.enable_rescaling else q

    def load_weights(self, filepath: str) -> None:
        """Loads HDF5 weights into the online and target networks and the actor."""
        self.learner.online.model.load_weights(filepath)
        self.learner.update_target()
        self.sync_actor()

    def save_weights(self, filepath: str, overwrite: bool = False) -> None:
        """Saves the online weights to HDF5, atomically (temporary file, then rename).

        Raises:
            FileExistsError: if `filepath` exists and `overwrite` is False.
        """
        save_weights_atomic(self.learner.online.model, filepath, overwrite)

    # Loops ---------------------------------------------------------------------------

    def fit(self, env: Any, nb_steps: int, action_repetition: int = 1,
            callbacks: list[Any] | None = None, verbose: int = 1, visualize: bool = False,
            nb_max_start_steps: int = 0, start_step_policy: Any = None,
            log_interval: int = 10000, nb_max_episode_steps: int | None = None
            ) -> keras.callbacks.History:
        """Trains for `nb_steps` env steps (keras-rl's arguments; see `rl.core.Agent.fit`).

        `env` is a `GymnasiumEnv` or a gymnasium env. Returns a Keras `History` whose
        `history` holds `episode_reward`, `nb_episode_steps` and `nb_steps` per episode.
        """
        from r2d2_agent.loops import run_episodes

        if not self.compiled:
            raise RuntimeError("call compile() before fit()")
        env = self._checked_env(env, self.config.seed)
        self.training = True
        self.actor.epsilon = self.train_epsilon
        return run_episodes(self, env, nb_steps=int(nb_steps),
                            nb_episodes=None, action_repetition=action_repetition,
                            callbacks=callbacks, verbose=verbose, visualize=visualize,
                            log_interval=log_interval,
                            nb_max_episode_steps=nb_max_episode_steps,
                            nb_max_start_steps=nb_max_start_steps,
                            start_step_policy=start_step_policy)

    def test(self, env: Any, nb_episodes: int = 1, action_repetition: int = 1,
             callbacks: list[Any] | None = None, visualize: bool = True,
             nb_max_episode_steps: int | None = None, nb_max_start_steps: int = 0,
             start_step_policy: Any = None, verbose: int = 1) -> keras.callbacks.History:
        """Runs `nb_episodes` evaluation episodes with ε = `config.test_epsilon`."""
        from r2d2_agent.loops import run_episodes

        env = self._checked_env(env, None)
        self.training = False
        self.sync_actor()
        self.reset_states()
        self.actor.epsilon = self.config.test_epsilon
        try:
            return run_episodes(self, env, nb_steps=None,
                                nb_episodes=int(nb_episodes),
                                action_repetition=action_repetition, callbacks=callbacks,
                                verbose=verbose, visualize=visualize, log_interval=0,
                                nb_max_episode_steps=nb_max_episode_steps,
                                nb_max_start_steps=nb_max_start_steps,
                                start_step_policy=start_step_policy)
        finally:
            self.actor.epsilon = self.train_epsilon
            self.reset_states()


    def _checked_env(self, env: Any, seed: int | None) -> Any:
        """Wraps a gymnasium env and checks its spaces against the config (unless a
        processor, which may reshape observations, is set)."""
        env = as_keras_rl_env(env, seed)
        if self.processor is None:
            check_env_matches_config(env.observation_space, env.action_space, self.config)
        return env


def save_weights_atomic(model: keras.Model, filepath: str, overwrite: bool) -> None:
    """Writes `model`'s weights to HDF5 through a temporary file and an atomic rename."""
    filepath = os.fspath(filepath)
    if os.path.exists(filepath) and not overwrite:
        raise FileExistsError(f"{filepath} exists; pass overwrite=True to replace it")
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(filepath)}.{os.getpid()}.tmp.h5")
    try:
        model.save_weights(tmp, save_format="h5")
        os.replace(tmp, filepath)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

