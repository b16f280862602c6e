"""`R2D2Agent`: single-process R2D2 as a keras-rl `Agent`.

The agent wires one `R2D2Actor` to one `R2D2Learner` in the same process, both made by
`R2D2Builder`. Its `fit`/`test` run `r2d2_agent.roles.EpisodeLoop` (the loop distributed
actors use too) under keras-rl's callback protocol (`on_train_begin`, `on_episode_*`,
`on_step_*`, `on_action_*` with the same log keys), count steps with Python ints
(keras-rl's own `fit` keeps an int16 counter that wraps after 32,767 steps) and keep
Gymnasium's `terminated` and `truncated` apart. With `config.envs_per_actor = N > 1`,
`fit` steps N envs with one batched forward pass per step (`R2D2VectorActor` in
`VectorEpisodeLoop`, as a distributed actor does).
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import (
    TrainingCounters,
    TrainingState,
    read_checkpoint,
    write_checkpoint,
)
from r2d2_agent.compat import keras, rl_core, set_global_seed
from r2d2_agent.config import R2D2Config
from r2d2_agent.envs.checks import check_env_matches_config
from r2d2_agent.envs.gymnasium_env import GymnasiumEnv, as_keras_rl_env
from r2d2_agent.image_models import ImageModel
from r2d2_agent.math import annealed_epsilon, apex_epsilon, resumed_seed
from r2d2_agent.replay.sizing import check_replay_fits
from r2d2_agent.roles.builder import R2D2Builder
from r2d2_agent.roles.episode_loop import EpisodeObserver, EpisodeResult, Transition
from r2d2_agent.roles.learner import METRIC_NAMES
from r2d2_agent.roles.prediction import (
    Prediction,
    RecurrentState,
    q_in_return_units,
    recurrent_step,
)
from r2d2_agent.roles.state_discrepancy import EpisodeRecorder, StateDiscrepancy
from r2d2_agent.roles.vector_actor import R2D2VectorActor
from r2d2_agent.roles.vector_loop import (
    EnvBatch,
    EnvList,
    GymVectorEnvBatch,
    VectorEpisodeLoop,
    VectorObserver,
    is_vector_env,
)

__all__ = ["R2D2Agent"]

logger = logging.getLogger(__name__)


class R2D2Agent(rl_core.Agent):
    """R2D2 in one process: act, store sequences, train every `train_interval` env steps.

    The replay's size is logged, and a replay larger than the machine's available memory
    is refused (`ValueError` naming `memory_capacity`) before anything is allocated.

    Args:
        config: The agent's configuration.
        image_model: Encoder for image inputs (`DQNImageModel` by default).
        processor: An optional keras-rl `Processor` applied to env outputs and actions.
        epsilon: Final exploration rate while training; `config.epsilon` when None
            (reached after `config.epsilon_anneal_steps` with `config.epsilon_start`).
        observation_dtype: Storage dtype of observations; None stores images as uint8 and
            values as float32.
        use_numpy_policy: Act with the numpy forward pass (None: whenever the network
            allows it).
    """

    def __init__(
        self,
        config: R2D2Config,
        image_model: ImageModel | None = None,
        processor: Any = None,
        epsilon: float | None = None,
        observation_dtype: Any = None,
        use_numpy_policy: bool | None = None,
    ) -> None:
        super().__init__(processor=processor)
        self.compiled = False
        if config.seed is not None:
            set_global_seed(config.seed)  # weight init, exploration, env resets
        self.config = config
        self.image_model = image_model
        self.builder = R2D2Builder(config, image_model, observation_dtype, use_numpy_policy)
        check_replay_fits(config, self.builder.observation_dtype)  # before allocating it
        self.learner = self.builder.make_learner()
        self.adder = self.builder.make_adder(self.learner.add)
        policy = self.builder.make_policy()
        self.train_epsilon = config.epsilon if epsilon is None else float(epsilon)
        # Two actors: `actor` records what it does (training, online weights);
        # `_eval_actor` only plays, with `config.test_epsilon` (`test()`, and forward()
        # while not training), with the greedy policy's weights: one policy for both,
        # or with `policy_average_updates` a policy of its own holding the average.
        eval_policy = policy if config.policy_average_updates == 0 else self.builder.make_policy()
        self.actor = self.builder.make_actor(policy, self.adder, self.train_epsilon, config.seed)
        self._eval_actor = self.builder.make_actor(
            eval_policy, None, config.test_epsilon, config.seed
        )
        self.actor.set_weights(self.learner.get_weights())
        self._own_eval_policy = eval_policy is not policy
        self._eval_stale = self._own_eval_policy  # its weights are copied when it plays
        self._vector_actor: R2D2VectorActor | None = None  # made by the first fit of N envs
        # the last fit's N envs (as passed) and their loop, whose episodes a later fit
        # on the same envs continues
        self._vector_fit: tuple[Any, VectorEpisodeLoop] | None = None
        # the envs (and vector envs) a fit has reset with `config.seed`: a later fit on
        # one of them continues its randomness instead of replaying the first fit's episodes
        self._seeded_envs: weakref.WeakSet[Any] = weakref.WeakSet()
        # the seed of this run's randomness: config.seed, moved on by a resume
        # (`resumed_seed`) so that a resumed run does not replay the run's first episodes
        self._run_seed = config.seed
        self.step = 0
        """Training env steps over all `fit` calls (continues from a resumed checkpoint)."""
        self.episodes = 0
        """Finished training episodes over all `fit` calls."""
        self.stop_reason: str | None = None
        """Why the last `fit`/`test` ended early on request (None: it ran to its limit)."""
        self.learner.run_counters = self._run_counters
        self._steps_since_sync = 0
        self._pending: tuple[int, float, bool, bool] | None = None
        self._last_action: int | None = None
        self._metrics = [float("nan")] * len(METRIC_NAMES)
        self._acting_updates = self.learner.updates  # learner updates the acting weights have
        self._predict_rng = np.random.default_rng(config.seed)
        self.recorder: EpisodeRecorder | None = None
        """What `record_episodes` keeps of the training episodes (None: nothing)."""

    # keras-rl Agent API --------------------------------------------------------------

    def compile(self, optimizer: Any = None, metrics: list[Any] | None = None) -> None:
        """Sets the optimizer (default: Adam from the config). `metrics` is unused.

        Called again (e.g. with a lower learning rate after a first `fit`), it replaces
        the optimizer: the next update trains with the new one, from fresh slots.
        """
        if optimizer is not None:
            self.learner.optimizer = optimizer
        self.compiled = True

    @property
    def layers(self) -> list[Any]:
        """The online model's layers."""
        return list(self.learner.online.model.layers)

    @property
    def metrics_names(self) -> list[str]:
        """Names of `last_metrics`: loss, mean Q, mean priority."""
        return list(METRIC_NAMES)

    @property
    def last_metrics(self) -> list[float]:
        """Metrics of the latest learner update (NaN before the first)."""
        return list(self._metrics)

    @property
    def model(self) -> keras.Model:
        """The online Keras model."""
        return self.learner.online.model

    @property
    def active_actor(self) -> Any:
        """The actor that `forward` uses: the recording one while training, else the
        evaluation one (its policy brought up to date with the greedy policy's weights
        first, when it has its own: `policy_average_updates`)."""
        return self.actor if self.training else self._playing_eval_actor()

    def _playing_eval_actor(self) -> Any:
        """The evaluation actor, its policy holding the greedy policy's latest weights."""
        if self._eval_stale:
            self._eval_actor.set_weights(self.learner.get_policy_weights())
            self._eval_stale = False
        return self._eval_actor

    def reset_states(self) -> None:
        """Forgets the current episode: recurrent state, frame stack, partial sequence
        (with N envs, every env's: the next `fit` starts their episodes afresh)."""
        self._reset_playing_states()
        if self._vector_actor is not None:
            self._vector_actor.reset_state()
        self._vector_fit = None

    def _reset_playing_states(self) -> None:
        """Forgets the single-env actors' episodes (not the N envs' of `fit`, which a
        later `fit` on the same envs continues)."""
        self.actor.reset_state()
        self._eval_actor.reset_state()
        self._pending = None
        self._last_action = None

    def forward(self, observation: Any) -> int:
        """Chooses an action for `observation` (starting an episode if none is running)."""
        actor = self.active_actor
        if self._pending is not None:  # backward() left the transition open
            self._complete(observation)
        if not actor.episode_started:
            actor.observe_first(observation)
        self._last_action = actor.select_action()
        return self._last_action

    def backward(
        self,
        reward: float,
        terminal: bool,
        *,
        truncated: bool = False,
        next_observation: Any = None,
    ) -> list[float]:
        """Records the reward of the last action and trains when it is time.

        In a loop of your own, report a time limit with `truncated=True` and the
        observation the env returned with it: the cut episode bootstraps from that
        last observation, which the next `forward` (already in a new episode) cannot give.

        Args:
            reward: Reward of the action returned by the last `forward`.
            terminal: Whether the episode terminated (no bootstrap).
            truncated: Whether it was cut by a time limit (bootstrap from the last state).
            next_observation: The observation after the action. Needed with `truncated`
                while training; otherwise it may be left to the next `forward` call.

        Returns:
            The metrics (named by `metrics_names`; NaN before the first update).

        Raises:
            RuntimeError: Without a `forward` before it.
            ValueError: If `truncated` (and not `terminal`) while training without
                `next_observation`.
        """
        if self._last_action is None:
            raise RuntimeError("backward() needs a forward() before it")
        if self.training and truncated and not terminal and next_observation is None:
            raise ValueError(
                "backward(truncated=True) needs next_observation (the observation the env "
                "returned with the time limit): the cut episode bootstraps from it, and the "
                "next forward() would pass the next episode's first observation instead"
            )
        self._pending = (self._last_action, float(reward), bool(terminal), bool(truncated))
        self._last_action = None
        if next_observation is not None:
            self._complete(next_observation)
        if not self.training:
            return self.last_metrics
        return self.count_training_step()

    def _complete(self, next_observation: Any) -> None:
        action, reward, terminated, truncated = self._pending
        self._pending = None
        self.active_actor.observe(action, reward, next_observation, terminated, truncated)

    def count_training_step(self) -> list[float]:
        """Counts one training env step: trains every `train_interval` steps once replay is
        warm, and refreshes the acting weights every `actor_sync_interval` steps.

        Returns:
            The metrics of the latest update (NaN before the first).
        """
        self._count_env_step()
        self.actor.epsilon = self.training_epsilon()
        if self._steps_since_sync >= self.config.actor_sync_interval:
            self.sync_actor()
        return self.last_metrics

    def _count_env_step(self) -> None:
        """Counts one training env step and trains every `train_interval` of them."""
        self.step += 1  # training env steps over all fit() calls (a plain int)
        self._steps_since_sync += 1
        if self.step % self.config.train_interval == 0 and self.learner.ready:
            metrics = self.learner.step()
            self._metrics = [metrics[name] for name in METRIC_NAMES]

    def training_epsilon(self) -> float:
        """The exploration rate at the current training step: `train_epsilon`, or with
        `config.epsilon_start` the linear ramp from it over `epsilon_anneal_steps`."""
        config = self.config
        return annealed_epsilon(
            config.epsilon_start, self.train_epsilon, config.epsilon_anneal_steps, self.step
        )

    @property
    def vector_epsilons(self) -> tuple[float, ...]:
        """The final exploration rate of each of `fit`'s N envs (`envs_per_actor`): the
        Ape-X schedule over the N envs from `train_epsilon`, env `j` at index `j` (as one
        distributed actor of N envs in a run of one actor; N = 1: `train_epsilon`)."""
        n = self.config.envs_per_actor
        return tuple(
            apex_epsilon(j, n, self.train_epsilon, self.config.epsilon_alpha) for j in range(n)
        )

    def _anneal_vector_epsilons(self) -> None:
        """Each env's rate at the agent's env step (all N envs), with
        `config.epsilon_start` on the ramp to its final rate."""
        config = self.config
        self._vector_actor.set_epsilons(
            [
                annealed_epsilon(
                    config.epsilon_start, final, config.epsilon_anneal_steps, self.step
                )
                for final in self.vector_epsilons
            ]
        )

    def _make_vector_actor(self) -> R2D2VectorActor:
        """The actor of `fit`'s N envs, made once: it shares the acting policy (so
        `sync_actor` reaches it) and sends env `j`'s sequences on replay stream `j + 1`
        (stream 0 is the single-env actor's), seeded with `config.seed + j` (in a
        resumed run, its `resumed_seed` + j)."""
        if self._vector_actor is None:
            n = self.config.envs_per_actor
            adder = self.builder.make_vector_adder([_StreamSink(self, j + 1) for j in range(n)])
            self._vector_actor = self.builder.make_vector_actor(
                self.actor.policy, adder, self.vector_epsilons, self._env_seeds()
            )
        return self._vector_actor

    def _env_seeds(self) -> list[int | None]:
        """The exploration seeds of the N envs' actor: the run's seed + j (None: unseeded)."""
        seed = self._run_seed
        return [None if seed is None else seed + j for j in range(self.config.envs_per_actor)]

    def sync_actor(self) -> None:
        """Copies the learner's online weights into the acting policy (with
        `policy_average_updates`, the greedy policy's weights go into the evaluation
        actor's own policy the next time it plays)."""
        self.actor.set_weights(self.learner.get_weights())
        self._acting_updates = self.learner.updates
        self._steps_since_sync = 0
        self._eval_stale = self._own_eval_policy

    def compute_q_values(self, observation: Any) -> np.ndarray:
        """Q-values of one observation in return units (h⁻¹ applied when rescaling, times
        the reward scale with `normalize_rewards`), from the agent's own recurrent state.

        That state is the one of the episode the agent is in: the training actor's during
        and after `fit` (where its last step left it), the evaluation actor's otherwise
        (`test` and `reset_states` leave it at zero, as a fresh agent has it). So after
        `fit` the same weights can give other Q-values than a fresh agent's until
        `reset_states()`. The weights are that actor's: the online ones during and after
        `fit`, the greedy policy's (`policy_average_updates`) otherwise. The recurrent
        state and the frame stack are not advanced. To pass the state yourself, use
        `predict`.
        """
        actor = self.active_actor
        return q_in_return_units(
            self.config, actor.q_values(observation), actor.policy.reward_scale
        )

    def predict(
        self,
        observation: Any,
        state: RecurrentState | None = None,
        episode_start: bool = False,
        *,
        reward: float | None = None,
        epsilon: float = 0.0,
    ) -> Prediction:
        """Chooses an action for `observation` from a recurrent state you pass and get back
        (as sb3-contrib's `predict(obs, state, episode_start)`): nothing in the agent
        changes, and what `fit` or `test` left in it does not matter.

        Start an episode with `state=None` (or `episode_start=True`), then pass each
        prediction's `state` with the episode's next observation. The learner's latest
        weights of the greedy policy are used (the online ones, or their average with
        `policy_average_updates`; refreshed if the learner updated since).

        Args:
            observation: One observation, as the env returned it.
            state: The `state` of the previous prediction in this episode; None starts one.
            episode_start: Whether `observation` starts an episode (the state is ignored).
            reward: The reward the env returned for the previous action; needed with
                `config.enable_prev_action_reward` (the network takes it), ignored otherwise.
            epsilon: Exploration rate of this choice (0: greedy, the default).

        Returns:
            A `Prediction`: `action, q_values, state = agent.predict(...)`, with the
            Q-values in return units (as `compute_q_values`).

        Example:
            >>> import gymnasium as gym
            >>> from r2d2_agent.presets import cartpole_config
            >>> agent = R2D2Agent(cartpole_config(seed=0))
            >>> env = gym.make("CartPole-v1")
            >>> observation, _ = env.reset(seed=0)
            >>> action, q_values, state = agent.predict(observation)  # a new episode
            >>> observation, reward, terminated, truncated, _ = env.step(action)
            >>> action, q_values, state = agent.predict(observation, state)  # its next step
            >>> q_values.shape, action == int(q_values.argmax())
            ((2,), True)

        Raises:
            TypeError: If `state` is not a `RecurrentState` (or None).
            ValueError: If `epsilon` is outside [0, 1], or `reward` is missing with
                `enable_prev_action_reward` in a running episode.
        """
        if state is not None and not isinstance(state, RecurrentState):
            raise TypeError(
                "state must be the `state` of a previous predict() (a RecurrentState) or "
                f"None to start an episode, got {type(state).__name__}"
            )
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        start = state is None or bool(episode_start)
        if not start and self.config.enable_prev_action_reward and reward is None:
            raise ValueError(
                "this network takes the previous reward (enable_prev_action_reward): pass "
                "reward=<the reward the env returned for the previous action>"
            )
        if self._acting_updates != self.learner.updates:
            self.actor.set_weights(self.learner.get_weights())
            self._acting_updates = self.learner.updates
            self._eval_stale = self._own_eval_policy
        policy = self._playing_eval_actor().policy  # the greedy policy's weights
        q, lstm, frames = recurrent_step(
            self.config,
            policy,
            observation,
            None if start else state,
            0.0 if reward is None else float(reward),
        )
        q = q_in_return_units(self.config, q, policy.reward_scale)
        if epsilon > 0.0 and self._predict_rng.random() < epsilon:
            action = int(self._predict_rng.integers(self.config.nb_actions))
        else:
            action = int(np.argmax(q))
        return Prediction(action, q, RecurrentState(lstm, frames, action))

    def record_episodes(self, keep: int = 10, every: int = 1) -> EpisodeRecorder:
        """Keeps training episodes for `state_discrepancy`: from the next episode on, one
        out of every `every` (frames, actions, rewards and the recurrent states stored),
        the last `keep` of them. Calling it again starts a new recorder. The kept
        episodes are held in memory whole: about `keep` x episode length x (frame bytes +
        2 x lstm_units x 4) bytes.

        Args:
            keep: Finished episodes to keep, at least 1.
            every: Record one episode out of this many, at least 1.

        Returns:
            The `EpisodeRecorder` (also `self.recorder`), a tee on the training adder.

        Raises:
            ValueError: If `keep` or `every` is not an int >= 1.
        """
        self.recorder = EpisodeRecorder(self.adder, keep, every)
        self.actor.adder = self.recorder
        return self.recorder

    def state_discrepancy(
        self, burnin: int | None = None, episodes: Any = None, **kwargs: Any
    ) -> StateDiscrepancy:
        """Is burn-in long enough? The Q-value discrepancy between replayed and true
        recurrent states by step of the trained window (Kapturowski et al. 2019, Fig. 1),
        for the learner's current network (`R2D2Learner.state_discrepancy`).

        Args:
            burnin: Burn-in steps to measure; `config.burnin` when None.
            episodes: `RecordedEpisode`s; the recorder's (`record_episodes`) when None.
            **kwargs: As for `r2d2_agent.roles.state_discrepancy.state_discrepancy`.

        Returns:
            A `StateDiscrepancy` (`r2d2_agent.plot.plot_state_discrepancy` draws it).

        Raises:
            RuntimeError: Without episodes: call `record_episodes` before `fit`.
        """
        if episodes is None:
            if self.recorder is None or not self.recorder.episodes:
                raise RuntimeError(
                    "no recorded episode: call agent.record_episodes(keep, every) before "
                    "fit(), or pass episodes="
                )
            episodes = self.recorder.episodes
        return self.learner.state_discrepancy(episodes, burnin, **kwargs)

    def load_weights(self, filepath: str) -> None:
        """Loads HDF5 weights into the online and target networks (and the average) and
        the actors.

        Takes a file written by `save_weights` or a checkpoint (its greedy policy's
        weights: the average with `policy_average_updates`, else the online ones).

        Raises:
            MissingCheckpointError: If the file does not exist (a `FileNotFoundError`).
            CorruptCheckpointError: If it is truncated or corrupted (an `OSError`); the
                message names the file and what to do.
            IncompatibleCheckpointError: If it holds another network's weights (a
                `ValueError`).
        """
        self.learner.load_weights(filepath)
        self.sync_actor()

    def _run_counters(self) -> TrainingCounters:
        return TrainingCounters(
            env_steps=self.step,
            episodes=self.episodes,
            actor_env_steps=(self.step,),
            actor_episodes=(self.episodes,),
        )

    def save_checkpoint(self, filepath: str | os.PathLike[str], save_replay: bool = False) -> str:
        """Writes a checkpoint that `fit(resume_from=...)` continues from: online and target
        weights, optimizer state, env steps, updates, episodes, the config (atomically).

        Args:
            filepath: The file to write (temp file, fsync, rename).
            save_replay: Also write the replay memory (sequences, sum-tree priorities,
                frames), so a resumed run samples from it at once; it can take gigabytes.

        Returns:
            The file written.
        """
        # Views of the live replay are enough: the state is written at once.
        return write_checkpoint(filepath, self.learner.save(replay=save_replay, copy_replay=False))

    def restore_checkpoint(self, path: str | os.PathLike[str]) -> TrainingState:
        """Continues from a checkpoint file (or a checkpoint directory's latest): weights,
        optimizer state and counters (`step`, `episodes`, `learner.updates`).

        Returns:
            The state read.

        Raises:
            MissingCheckpointError: No such file, or no checkpoint in the directory.
            CorruptCheckpointError: Truncated or corrupted file.
            IncompatibleCheckpointError: Written for a network of another shape (the
                message names the fields).
        """
        state = read_checkpoint(path)
        self.learner.restore(state)
        self.step = state.counters.env_steps
        self.episodes = state.counters.episodes
        self._reseed(resumed_seed(self.config.seed, self.step))
        self.reset_states()
        self.sync_actor()
        logger.info("resumed from %s", state.describe())
        return state

    def _reseed(self, seed: int | None) -> None:
        """Starts this run's randomness from `seed`: the training actors' exploration and
        the first reset of envs not trained on yet (a resumed checkpoint's
        `resumed_seed`)."""
        self._run_seed = seed
        self.actor.reseed(seed)
        if self._vector_actor is not None:
            self._vector_actor.reseed(self._env_seeds())

    def request_stop(self, reason: str = "requested") -> None:
        """Ends the running `fit` or `test` before its next step (e.g. from a callback).

        Args:
            reason: Kept in `stop_reason` and logged.
        """
        if self.stop_reason is None:
            logger.info("stop requested: %s", reason)
            self.stop_reason = reason

    def save_weights(self, filepath: str, overwrite: bool = False) -> None:
        """Saves the greedy policy's weights to HDF5 (the online ones, or their average with
        `policy_average_updates`), atomically (temporary file, then rename).

        Raises:
            FileExistsError: If `filepath` exists and `overwrite` is False.
        """
        self.learner.save_weights(filepath, overwrite)

    # Loops ---------------------------------------------------------------------------

    def fit(
        self,
        env: Any,
        nb_steps: int,
        action_repetition: int = 1,
        callbacks: list[Any] | None = None,
        verbose: int = 1,
        visualize: bool = False,
        nb_max_start_steps: int = 0,
        start_step_policy: Any = None,
        log_interval: int = 10000,
        nb_max_episode_steps: int | None = None,
        *,
        resume_from: str | os.PathLike[str] | None = None,
    ) -> keras.callbacks.History:
        """Trains for `nb_steps` env steps (keras-rl's arguments; see `rl.core.Agent.fit`).

        With `resume_from`, the agent first continues from that checkpoint (weights,
        optimizer state, env steps, updates, episodes) and `nb_steps` is the total: a
        checkpoint taken at 30,000 env steps and `nb_steps=50_000` train 20,000 more.

        Each `fit` on one env starts a new episode. The first `fit` on an env resets it
        with `config.seed` (when set); a later `fit` on the same env continues its
        randomness, so training in chunks with a `test` between meets new initial states
        in every chunk, not the first chunk's again (a seed set on the env with
        `GymnasiumEnv.seed` is used by the next `fit`). A `fit` resumed from a checkpoint
        seeds the first reset and the exploration from `resumed_seed(config.seed, the
        checkpoint's env steps)` instead (`r2d2_agent.math`), so that a resumed run meets
        new episodes, not those the run began with.

        **N envs** (`config.envs_per_actor = N > 1`): pass `env` as a list of N envs (or
        `GymnasiumEnv`s) or as a Gymnasium `VectorEnv` of N envs (`gymnasium.make_vec`,
        `SyncVectorEnv`, `AsyncVectorEnv`; left open, as a single env is). The agent
        then selects all N actions with one batched forward pass per step; each env keeps
        its own recurrent state, frame stack, episodes (one that ends resets alone),
        sequences (env `j` on replay stream `j + 1`), seed (`config.seed + j`) and
        exploration rate (`vector_epsilons`: the Ape-X schedule over the N envs, each
        annealed over env steps of all N with `config.epsilon_start`), exactly as one
        distributed actor of N envs. `nb_steps`, `train_interval`, `actor_sync_interval`
        and `self.step` count env steps of all N envs; the limit is checked before each
        step of the N envs, so up to N-1 more env steps may be taken. Weights are synced
        between batched steps. keras-rl callbacks see every env's episode as an episode
        (numbered as they begin, `env` in the logs of `on_episode_end`) and the step and
        action hooks once per env step, in env order after each batched step (`env` and
        `episode` in the logs of `on_step_end`). N envs take no `action_repetition`,
        `nb_max_start_steps`, `nb_max_episode_steps` (use the env's own time limit,
        `gymnasium.make(id, max_episode_steps=...)`), `visualize`, agent `processor`
        (use Gymnasium wrappers) or `record_episodes`. A later `fit` on the same N envs
        (the same `VectorEnv`, or a list of the same env objects) continues their
        episodes where the last one stopped (recurrent states, frame stacks, partial
        sequences), so training in chunks with a `test` between records what one `fit`
        of the whole would; other envs, `reset_states()`, a restored checkpoint or a
        `fit` stopped by Ctrl-C start every env afresh (a new episode; an env this agent
        trained on before is not seeded again, its randomness goes on).

        Args:
            env: A Gymnasium env or a `GymnasiumEnv`; with `envs_per_actor = N > 1`, a
                list of N of them or a Gymnasium `VectorEnv` of N envs.
            nb_steps: Training env steps (agent steps, action repeats counted once; with
                N envs, the steps of all N).
            action_repetition: Env steps per agent step.
            callbacks: Keras-rl callbacks.
            verbose: 0 silent, 1 interval logs, 2 episode logs.
            visualize: Render the env after each action.
            nb_max_start_steps: Up to this many random actions after each reset.
            start_step_policy: Chooses those actions (default: random).
            log_interval: Env steps between interval logs (verbose=1).
            nb_max_episode_steps: Truncate episodes after this many agent steps.
            resume_from: A checkpoint file, or a directory of them (its latest is used).

        Returns:
            A Keras `History` whose `history` holds `episode_reward`, `nb_episode_steps`
            and `nb_steps` per episode.

        Raises:
            RuntimeError: Before `compile()`.
            ValueError: If the env's spaces do not fit the config, the number of envs is
                not `config.envs_per_actor`, or N > 1 envs come with an argument they
                do not take.
            CheckpointError: If `resume_from` is missing, truncated, corrupted or written
                for another network (see `restore_checkpoint`).
        """
        from r2d2_agent.keras_rl.fit_loop import run_keras_rl_loop

        if not self.compiled:
            raise RuntimeError("call compile() before fit()")
        keras_env = self._checked_training_envs(env)
        if not isinstance(keras_env, GymnasiumEnv):
            _check_vector_fit_arguments(
                action_repetition=(action_repetition, 1),
                nb_max_start_steps=(nb_max_start_steps, 0),
                start_step_policy=(start_step_policy, None),
                nb_max_episode_steps=(nb_max_episode_steps, None),
                visualize=(visualize, False),
                processor=(self.processor, None),
                record_episodes=(self.recorder, None),
            )
        if resume_from is not None:
            self.restore_checkpoint(resume_from)
            nb_steps = int(nb_steps) - self.step
            if nb_steps < 1:
                logger.warning(
                    "the checkpoint is at %d env steps, not below nb_steps: nothing to train",
                    self.step,
                )
                history = keras.callbacks.History()
                history.history = {}
                return history
        self.training = True
        if not isinstance(keras_env, GymnasiumEnv):
            return self._fit_vector(env, keras_env, int(nb_steps), callbacks, verbose, log_interval)
        seed = self._first_reset_seed(keras_env)
        self.actor.epsilon = self.training_epsilon()
        return run_keras_rl_loop(
            self,
            keras_env,
            self.actor,
            observers=[_TrainingSteps(self)],
            seed=seed,
            nb_steps=int(nb_steps),
            nb_episodes=None,
            action_repetition=action_repetition,
            callbacks=callbacks,
            verbose=verbose,
            visualize=visualize,
            log_interval=log_interval,
            nb_max_episode_steps=nb_max_episode_steps,
            nb_max_start_steps=nb_max_start_steps,
            start_step_policy=start_step_policy,
        )

    def test(
        self,
        env: Any,
        nb_episodes: int = 1,
        action_repetition: int = 1,
        callbacks: list[Any] | None = None,
        visualize: bool = True,
        nb_max_episode_steps: int | None = None,
        nb_max_start_steps: int = 0,
        start_step_policy: Any = None,
        verbose: int = 1,
    ) -> keras.callbacks.History:
        """Plays `nb_episodes` evaluation episodes with epsilon = `config.test_epsilon`.

        Nothing is recorded or trained. Arguments as for `fit`; returns a Keras `History`
        whose `nb_steps` entries are each episode's own length (keras-rl's convention).
        """
        from r2d2_agent.keras_rl.fit_loop import run_keras_rl_loop

        keras_env = self._checked_env(env)
        self.training = False
        self.sync_actor()
        self._reset_playing_states()
        try:
            return run_keras_rl_loop(
                self,
                keras_env,
                self._playing_eval_actor(),
                observers=[],
                seed=keras_env.take_seed(),
                nb_steps=None,
                nb_episodes=int(nb_episodes),
                action_repetition=action_repetition,
                callbacks=callbacks,
                verbose=verbose,
                visualize=visualize,
                log_interval=0,
                nb_max_episode_steps=nb_max_episode_steps,
                nb_max_start_steps=nb_max_start_steps,
                start_step_policy=start_step_policy,
            )
        finally:
            self._reset_playing_states()

    def _first_reset_seed(self, keras_env: GymnasiumEnv) -> int | None:
        """The seed of a single-env `fit`'s first reset: `config.seed` the first time this
        agent trains on the env, then whatever seed was set on it (`GymnasiumEnv.seed`),
        else None: a later `fit` continues the env's randomness, so that training in
        chunks does not start every chunk from the first chunk's initial states."""
        taken = keras_env.take_seed()  # config.seed, when it applies, wins over it
        return self._run_seed if self._claim_config_seed(keras_env.env) else taken

    def _claim_config_seed(self, env: Any) -> bool:
        """Whether `fit` seeds `env` (one env, or a `VectorEnv`) from `config.seed`: only
        the first time this agent trains on it (and only if the config has a seed; a
        resumed run seeds from the checkpoint's `resumed_seed`)."""
        if self._run_seed is None or env in self._seeded_envs:
            return False
        self._seeded_envs.add(env)
        return True

    def _fit_vector(
        self,
        source: Any,
        envs: tuple[EnvBatch, list[tuple[bool, int | None]]],
        nb_steps: int,
        callbacks: list[Any] | None,
        verbose: int,
        log_interval: int,
    ) -> keras.callbacks.History:
        """`fit` in N envs (see there): one `R2D2VectorActor` in `VectorEpisodeLoop`,
        continuing the episodes of the last `fit` when `source` (the envs as passed) is
        the same envs and nothing reset them since."""
        from r2d2_agent.keras_rl.fit_loop import run_keras_rl_vector_loop

        actor = self._make_vector_actor()
        self._anneal_vector_epsilons()
        kept = self._vector_fit
        if kept is not None and _same_envs(kept[0], source) and kept[1].in_flight:
            loop, continuing = kept[1], True
        else:
            batch, claims = envs
            seeds = self._first_reset_seeds(claims)
            loop, continuing = VectorEpisodeLoop(batch, actor, seeds=seeds), False
        self._vector_fit = (tuple(source) if isinstance(source, list) else source, loop)
        return run_keras_rl_vector_loop(
            self,
            loop,
            observers=[_VectorTrainingSteps(self)],
            nb_steps=nb_steps,
            callbacks=callbacks,
            verbose=verbose,
            log_interval=log_interval,
            continue_episodes=continuing,
        )

    def _checked_training_envs(
        self, env: Any
    ) -> GymnasiumEnv | tuple[EnvBatch, list[tuple[bool, int | None]]]:
        """`fit`'s env: one env as a checked `GymnasiumEnv`; N envs (a list or a
        `VectorEnv`, N = `config.envs_per_actor`) as an `EnvBatch` with, per env, how its
        first reset is seeded (`_first_reset_seeds`): `(True, None)` from the run's seed
        (`config.seed + j`) the first time this agent trains on the env (or `VectorEnv`),
        else `(False, a GymnasiumEnv's own seed or None)` (its randomness goes on)."""
        n = self.config.envs_per_actor
        several = isinstance(env, (list, tuple)) or is_vector_env(env)
        if not several:
            if n > 1:
                raise ValueError(
                    f"fit() got one env, but envs_per_actor={n}: pass a list of {n} envs or a "
                    f"Gymnasium vector env of {n} (gymnasium.make_vec(id, num_envs={n}))"
                )
            return self._checked_env(env)
        count = int(env.num_envs) if is_vector_env(env) else len(env)
        if count != n:
            raise ValueError(f"fit() got {count} envs, but envs_per_actor={n}")
        if is_vector_env(env):
            if self.processor is None:
                check_env_matches_config(
                    env.single_observation_space,
                    env.single_action_space,
                    self.config,
                    self.builder.observation_dtype,
                )
            seeded = self._claim_config_seed(env)
            return GymVectorEnvBatch(env), [(seeded, None)] * n
        if n == 1:
            return self._checked_env(env[0])
        wrapped = [self._checked_env(e) for e in env]
        claims = [(self._claim_config_seed(w.env), w.take_seed()) for w in wrapped]
        return EnvList([w.env for w in wrapped]), claims

    def _first_reset_seeds(self, claims: list[tuple[bool, int | None]]) -> list[int | None]:
        """Each env's first-reset seed in a `fit` of N envs, from `_checked_training_envs`'
        claims: the run's seed + j (`config.seed`, or a resumed checkpoint's
        `resumed_seed`, known only once `fit` restored it) or the env's own."""
        seed = self._run_seed
        return [
            seed + j if claimed and seed is not None else own
            for j, (claimed, own) in enumerate(claims)
        ]

    def _checked_env(self, env: Any) -> GymnasiumEnv:
        """Wraps a Gymnasium env and checks its spaces against the config (unless a
        processor, which may reshape observations, is set).

        Raises:
            ValueError: If `env` is several envs (only `fit` takes N of them).
        """
        if isinstance(env, (list, tuple)) or is_vector_env(env):
            raise ValueError(
                f"test() plays one env, got {type(env).__name__} of several; only fit() takes "
                "N envs (envs_per_actor > 1)"
            )
        keras_env = as_keras_rl_env(env)
        if self.processor is None:
            check_env_matches_config(
                keras_env.observation_space,
                keras_env.action_space,
                self.config,
                self.builder.observation_dtype,
            )
        return keras_env


class _StreamSink:
    """An adder's sink that hands sequences to the agent's learner on one replay stream
    (looked up at each call, so a test can watch `learner.add`)."""

    def __init__(self, agent: R2D2Agent, stream: int) -> None:
        self._agent = agent
        self._stream = stream

    def __call__(self, record: Any) -> None:
        self._agent.learner.add(record, self._stream)


def _same_envs(kept: Any, given: Any) -> bool:
    """Whether `given` (`fit`'s N envs as passed: a list or a `VectorEnv`) are the envs
    `kept` of an earlier `fit` (a tuple of the list's envs as they were then, or the
    `VectorEnv`): the same env objects in the same order, or the same `VectorEnv`."""
    if isinstance(kept, tuple) and isinstance(given, (list, tuple)):
        return len(kept) == len(given) and all(a is b for a, b in zip(kept, given, strict=True))
    return kept is given


def _check_vector_fit_arguments(**arguments: tuple[Any, Any]) -> None:
    """Refuses `fit` arguments that N envs do not take (each given as (value, default)).

    Raises:
        ValueError: Naming the first argument that is not at its default.
    """
    for name, (value, default) in arguments.items():
        if value is not default and value != default:
            raise ValueError(
                f"fit() with envs_per_actor > 1 does not take {name} (got {value!r}); see "
                "R2D2Agent.fit for what to use instead"
            )


class _VectorTrainingSteps(VectorObserver):
    """Counts `fit`'s env steps of N envs on the agent: trains every `train_interval`
    of them, syncs the acting weights between batched steps, anneals each env's ε."""

    def __init__(self, agent: R2D2Agent) -> None:
        self._agent = agent

    def on_step_begin(self) -> None:
        agent = self._agent
        if agent._steps_since_sync >= agent.config.actor_sync_interval:
            agent.sync_actor()

    def on_env_step_end(self, env: int, episode_step: int, transition: Transition) -> None:
        self._agent._count_env_step()

    def on_env_episode_end(self, env: int, result: EpisodeResult) -> None:
        self._agent.episodes += 1

    def on_step_end(self) -> None:
        self._agent._anneal_vector_epsilons()


class _TrainingSteps(EpisodeObserver):
    """Counts `fit`'s env steps on the agent, which trains and syncs when it is time."""

    def __init__(self, agent: R2D2Agent) -> None:
        self._agent = agent

    def on_step_end(self, episode_step: int, transition: Transition) -> None:
        self._agent.count_training_step()

    def on_episode_end(self, result: EpisodeResult) -> None:
        self._agent.episodes += 1
