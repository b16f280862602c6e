"""`R2D2Learner`: prioritized sequence replay in, one compiled update per batch.

The learner does not know whether it runs beside the actor in one process or alone in a
learner process: it takes finished sequences through `add`, trains with `step`, and hands
out weights with `get_weights` (the online network, for actors) and `get_policy_weights`
(the greedy policy's: with `policy_average_updates`, a moving average of the online
weights kept in the update's graph). `save` and `restore` (as Acme's learner) hand its whole
state, counters included (and the replay memory when asked), to and from a checkpoint.
`R2D2Builder.make_learner` builds it from a config.

With `normalize_rewards`, every record brings the moments of the rewards it adds; the
learner merges them into the online network's `RewardStatistics` (at the start of each
update's graph, and before handing out or saving weights) and divides the n-step returns
and the previous-reward input by their scale in the update's graph.

Each batch is cut to its extent before the update (`r2d2_agent.replay.extent`): no burn-in
when no sequence of the batch has a real burn-in step, and the trained steps up to the
batch's last real one (rounded up to a quarter of the window). The networks are causal and
the padding is masked, so it is the same update on fewer steps; each extent met is traced
once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import (
    IncompatibleCheckpointError,
    ReplaySnapshot,
    TrainingCounters,
    TrainingState,
    changed_fields,
    check_compatible,
    config_as_data,
    is_checkpoint_file,
    read_checkpoint,
)
from r2d2_agent.compat import flat_caller, keras, tf
from r2d2_agent.config import R2D2Config
from r2d2_agent.math import check_reward_moments, importance_weights, linear_schedule, tf_ops
from r2d2_agent.networks.keras_net import R2D2Network
from r2d2_agent.networks.numpy_net import NumpyNetwork, supports_numpy
from r2d2_agent.networks.weights_io import save_weights_atomic, split_published
from r2d2_agent.replay.adder import SequenceRecord
from r2d2_agent.replay.extent import BatchExtent, batch_extent, trim_batch
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.sequence_replay import SequenceReplay
from r2d2_agent.roles.state_discrepancy import StateDiscrepancy, state_discrepancy

__all__ = ["METRIC_NAMES", "R2D2Learner"]

logger = logging.getLogger(__name__)

METRIC_NAMES = ("loss", "mean_q", "mean_priority")
"""Metrics of one learner update, in `R2D2Agent.metrics_names` order."""


class R2D2Learner:
    """Holds the online and target networks, the optimizer and the replay.

    Args:
        config: The agent's configuration.
        online: The network being trained.
        target: The target network (same architecture); it gets the online weights now
            and every `config.target_update_interval` updates. At an interval of 1 the
            update reads the online network instead, and the target network gets the
            online weights when a checkpoint is written (`save`).
        optimizer: A Keras optimizer.
        replay: The prioritized replay the learner samples from.
        average: With `config.policy_average_updates` > 0, a third network of the same
            architecture that holds the moving average of the online weights (it starts
            as a copy of them); None otherwise.

    Raises:
        ValueError: If `average` is given without `policy_average_updates` or missing
            with it.
    """

    def __init__(
        self,
        config: R2D2Config,
        online: R2D2Network,
        target: R2D2Network,
        optimizer: keras.optimizers.Optimizer,
        replay: SequenceReplay,
        average: R2D2Network | None = None,
    ) -> None:
        if (average is not None) != (config.policy_average_updates > 0):
            raise ValueError(
                "the learner takes an average network exactly when "
                f"config.policy_average_updates > 0 (it is {config.policy_average_updates}), "
                f"got average={'a network' if average is not None else None}"
            )
        self.config = config
        self.online = online
        self.target = target
        self.average = average
        """The greedy policy's network with `policy_average_updates` (None without)."""
        self.replay = replay
        self._layout = SequenceLayout.from_config(config)  # what `trim_batch` cuts by
        self._fields = tuple(replay.batch_spec())
        """The batch's fields, in the order the compiled update takes them."""
        self.optimizer = optimizer  # the setter creates its slots and the update's function
        self.updates = 0
        """Learner updates done (continues from a restored checkpoint)."""
        self.sequences_added = 0
        """Sequences added to replay (continues from a restored checkpoint)."""
        self.run_counters: Callable[[], TrainingCounters] | None = None
        """Where the run's env steps and episodes come from (set by whoever runs the
        learner: the single-process agent, or a distributed backend's shared counters);
        `counters()` adds the learner's own counts."""
        self.weights_replaced = 0
        """How many times the weights were replaced from outside training
        (`set_weights`, `load_weights`, `restore`): a runner that sees it change in a
        hook publishes the new weights."""
        self.policy_factory: Callable[[], Any] | None = None
        """Makes an acting network for this config (`R2D2Builder.make_policy`, set by
        `make_learner`): what evaluations in the learner's process act with."""
        self.last_metrics: dict[str, float] = {}
        self._new_rewards = [0, 0.0]  # count, sum of squares not yet in the statistics
        self._merge: Any = None  # `flush_reward_statistics`'s graph, made on first use
        self._copy_untrained: Any = None  # its copy into the average, made on first use
        self._copy = tf.function(self._copy_graph, autograph=False)
        self._reset = tf.function(self._reset_average_graph, autograph=False)
        self.update_target()
        self.reset_average()

    @property
    def optimizer(self) -> keras.optimizers.Optimizer:
        """The Keras optimizer. Setting one creates its slots for the online network's
        variables (zeros, as the first update would): a first trace of the update that
        created them would make TensorFlow trace it a second time."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: keras.optimizers.Optimizer) -> None:
        build = getattr(optimizer, "build", None)
        if build is not None:
            build(self.online.model.trainable_variables)
        self._optimizer = optimizer
        # A traced update holds the optimizer it was traced with: a new one needs a new
        # trace. AutoGraph only for an image model that asks for it
        # (`ImageModel.autograph`): the update's own control flow is plain Python over
        # static shapes and config flags, and converting it took half of the tracing time.
        self._train: dict[BatchExtent, Any] = {}  # a `tf.function` per batch extent
        self._updates: dict[BatchExtent, Any] = {}  # its concrete function, `flat_caller`

    # Data in / weights out -----------------------------------------------------------

    def add(self, record: SequenceRecord, stream: int = 0) -> None:
        """Stores one finished sequence (and the new frames it brings).

        Args:
            record: From a `SequenceAdder`.
            stream: Which adder (actor) it comes from; frame ids are per stream.
        """
        self.replay.add(record, stream)
        self.sequences_added += 1
        self._new_rewards[0] += record.reward_count
        self._new_rewards[1] += record.reward_sum_square

    def flush_reward_statistics(self) -> None:
        """Merges the moments of the rewards received since the last call into the online
        network's reward statistics (`normalize_rewards`; a no-op without).
        `get_weights`, `save`, `save_weights` and `reward_scale` call it; `learn` merges
        them in its graph."""
        new_rewards = self._take_new_rewards()
        stats = self.online.reward_statistics
        if stats is not None and new_rewards[0] > 0:
            if self._merge is None:
                self._merge = tf.function(stats.merge_in_graph, autograph=False)
            self._merge(tf.constant(new_rewards[0]), tf.constant(new_rewards[1]))
            if self.average is not None:  # the policy's statistics are the online's
                self._reset_average_untrained()

    @property
    def reward_scale(self) -> float:
        """What rewards are divided by: the root mean square of every reward received
        (`r2d2_agent.math.reward_scale`); 1.0 without `normalize_rewards`. The network's
        Q-values times this (after h⁻¹) are in return units."""
        self.flush_reward_statistics()
        return self.online.reward_scale

    @property
    def ready(self) -> bool:
        """Whether replay holds enough sequences (`config.warmup`) to train."""
        return len(self.replay) >= self.config.warmup

    def get_weights(self) -> list[np.ndarray]:
        """The online network's weights (with the reward statistics up to date): what
        actors explore with."""
        self.flush_reward_statistics()
        return self.online.get_weights()

    def get_policy_weights(self) -> list[np.ndarray]:
        """The greedy policy's weights: the moving average of the online weights with
        `config.policy_average_updates` (its reward statistics the online network's),
        the online weights without."""
        if self.average is None:
            return self.get_weights()
        self.flush_reward_statistics()
        return self.average.get_weights()

    def get_published_weights(self) -> list[np.ndarray]:
        """What a distributed learner publishes: the online weights, then, with
        `policy_average_updates`, the policy's (`split_published` takes them apart)."""
        if self.average is None:
            return self.get_weights()
        return self.get_weights() + self.average.get_weights()

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Sets the online and the target network's weights (and the average's)."""
        self.online.set_weights(weights)
        self.update_target()
        self.reset_average()
        self.weights_replaced += 1

    def set_published_weights(self, arrays: list[np.ndarray]) -> None:
        """Sets what `get_published_weights` returned: the online and target weights
        and, with `policy_average_updates`, the average's.

        Raises:
            ValueError: If the number of arrays is not what this learner publishes.
        """
        expected = len(self.online.model.weights) * (1 if self.average is None else 2)
        if len(arrays) != expected:
            raise ValueError(
                f"{len(arrays)} published weight arrays for a learner that publishes {expected}"
            )
        online, policy = split_published(arrays, self.average is not None)
        self.set_weights(online)
        if self.average is not None:
            self.average.set_weights(policy)

    def load_weights(self, filepath: str | os.PathLike[str]) -> None:
        """Loads a policy's weights into the online network (the target and the average
        get a copy) from a weights file written by `save_weights` or from a checkpoint
        (only its policy's weights are used: `TrainingState.policy_weights`).

        Raises:
            MissingCheckpointError: If the file does not exist (a `FileNotFoundError`).
            CorruptCheckpointError: If it is truncated or corrupted (an `OSError`).
            IncompatibleCheckpointError: If it holds weights of another network (a
                `ValueError`).
        """
        path = os.fspath(filepath)
        if is_checkpoint_file(path):
            state = read_checkpoint(path, verify_replay=False)
            check_compatible(state, self.config, replay=False)
            self._assign("online", self.online.model.weights, state.policy_weights, state)
        else:
            try:
                self.online.model.load_weights(path)
            except (OSError, ValueError) as exc:
                raise IncompatibleCheckpointError(
                    path,
                    f"weights file {path} does not fit this network ({exc}); load weights "
                    "saved from a network with the same input_shape, nb_actions, "
                    "lstm_units, dense_units, enable_dueling, enable_prev_action_reward, "
                    "normalize_rewards and image model",
                ) from exc
        self.update_target()
        self.reset_average()
        self.weights_replaced += 1

    def save_weights(self, filepath: str | os.PathLike[str], overwrite: bool = False) -> None:
        """Saves the greedy policy's weights (`get_policy_weights`: the online ones, or
        their average with `policy_average_updates`; reward statistics included) to
        HDF5, atomically.

        Raises:
            FileExistsError: If `filepath` exists and `overwrite` is False.
        """
        self.flush_reward_statistics()
        network = self.online if self.average is None else self.average
        save_weights_atomic(network.model, filepath, overwrite)

    def update_target(self) -> None:
        """Copies the online weights into the target network."""
        self._copy()

    def reset_average(self) -> None:
        """Starts the average over: a copy of the online weights (nothing without
        `policy_average_updates`)."""
        if self.average is not None:
            self._reset()

    def state_discrepancy(
        self, episodes: Any, burnin: int | None = None, **kwargs: Any
    ) -> StateDiscrepancy:
        """The recurrent-state diagnostic (Kapturowski et al. 2019, Fig. 1) of the online
        network: the mean Q-value discrepancy by trained step of the windows the replay
        cuts from `episodes`, from the stored or a zero state, with or without burn-in.
        Changes nothing; see `r2d2_agent.roles.state_discrepancy`. Value-input networks
        run through the numpy forward pass with the online weights: the same outputs in
        about a third of the time of eager Keras calls (benchmarks/RESULTS.md).

        Args:
            episodes: `RecordedEpisode`s (e.g. `EpisodeRecorder.episodes`).
            burnin: Burn-in steps to measure; `config.burnin` when None.
            **kwargs: As for `state_discrepancy` (`max_batch_bytes`).
        """
        network: Any = self.online
        if supports_numpy(self.config):
            network = NumpyNetwork(self.config, self.online.get_weights())
        dtype = self.replay.layout.frame_dtype
        return state_discrepancy(
            network, self.config, episodes, burnin, frame_dtype=dtype, **kwargs
        )

    # Checkpoints ------------------------------------------------------------------------

    def counters(self) -> TrainingCounters:
        """The run's counters: env steps and episodes from `run_counters` (zero when it
        is not set), learner updates and sequences from the learner itself."""
        base = self.run_counters() if self.run_counters is not None else TrainingCounters()
        return dataclasses.replace(
            base, learner_updates=self.updates, sequences_received=self.sequences_added
        )

    def save(self, replay: bool = False, copy_replay: bool = True) -> TrainingState:
        """The learner's state: online and target weights, the optimizer's variables
        (Adam's iteration count and moments), `counters()` and the config.

        Write it with `r2d2_agent.checkpoints.write_checkpoint`.

        Args:
            replay: Also hold the replay memory (`SequenceReplay.export_state`: sequences,
                sum-tree priorities, frames, cursors). It can take gigabytes.
            copy_replay: Copy the replay's arrays. False keeps views of the live replay,
                which stay valid only until the replay changes: write the state at once
                (as `CheckpointCallback` does), without holding the replay twice.
        """
        from r2d2_agent import __version__

        self.flush_reward_statistics()
        if self.config.target_update_interval == 1:  # not copied after each update
            self.update_target()
        variables = self._optimizer_variables()
        return TrainingState(
            online_weights=self.online.get_weights(),
            target_weights=self.target.get_weights(),
            average_weights=None if self.average is None else self.average.get_weights(),
            optimizer_weights=[np.asarray(v.numpy()) for v in variables],
            weight_names=tuple(v.name for v in self.online.model.weights),
            optimizer_names=tuple(v.name for v in variables),
            counters=self.counters(),
            config=config_as_data(self.config),
            library_version=__version__,
            replay=(
                ReplaySnapshot.from_state(self.replay.export_state(copy=copy_replay))
                if replay
                else None
            ),
        )

    def restore(self, state: TrainingState, replay: bool = True) -> None:
        """Continues from `state`: weights, optimizer state, update and sequence counts,
        and, with `replay`, the replay memory when the checkpoint holds one (its
        sequences, priorities and frames replace the replay's contents, so training goes
        on without refilling). A checkpoint without replay leaves the replay as it is
        (a new learner's is empty and refills).

        Args:
            state: A checkpoint's state (`read_checkpoint`, or `save()`).
            replay: Restore the checkpoint's replay memory, if it holds one.

        Raises:
            IncompatibleCheckpointError: If the checkpoint was written for a network of
                another shape (naming the fields or the weight), or with an optimizer
                of another kind, or holds a replay that does not fit this learner's
                (naming `memory_capacity` or the other field).
            CorruptCheckpointError: If the replay's arrays, read from the file now
                (straight into the replay's own: the replay is held once), are gone or
                fail their checksum; the replay is then left empty.
        """
        check_compatible(state, self.config, replay=replay)
        replay_state = None
        if replay and state.replay is not None:  # checked before anything changes
            replay_state = state.replay.state()  # arrays read straight into the replay
            try:
                self.replay.check_state(replay_state)
            except ValueError as exc:
                raise IncompatibleCheckpointError(
                    state.path or "checkpoint",
                    f"checkpoint {state.path}: its replay memory does not fit this "
                    f"learner's replay ({exc}); resume with the settings it was written "
                    "with, or from a checkpoint without the replay",
                ) from exc
        changed = changed_fields(state, self.config)
        if changed:
            logger.info(
                "resuming %s with changed settings: %s",
                state.path,
                ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items()),
            )
        self._assign("online", self.online.model.weights, state.online_weights, state)
        self._assign("target", self.target.model.weights, state.target_weights, state)
        self._assign("optimizer", self._optimizer_variables(), state.optimizer_weights, state)
        if self.average is not None and state.average_weights is not None:
            self._assign("average", self.average.model.weights, state.average_weights, state)
        else:  # written without the average: it starts over from the online weights
            self.reset_average()
        self.updates = state.counters.learner_updates
        self.sequences_added = state.counters.sequences_received
        self.weights_replaced += 1
        if replay_state is not None:
            self.replay.restore_state(replay_state)
            logger.info("restored a replay of %d sequences from %s", len(self.replay), state.path)

    def _optimizer_variables(self) -> list[Any]:
        variables = self.optimizer.variables
        return list(variables() if callable(variables) else variables)

    @staticmethod
    def _assign(what: str, variables: list[Any], arrays: list[np.ndarray], state: Any) -> None:
        if len(variables) != len(arrays):
            raise IncompatibleCheckpointError(
                state.path or "checkpoint",
                f"checkpoint {state.path} holds {len(arrays)} {what} variables, this learner "
                f"has {len(variables)} (another network or optimizer); resume with the "
                "settings it was written with",
            )
        for i, (variable, array) in enumerate(zip(variables, arrays, strict=True)):
            if tuple(variable.shape) != tuple(array.shape):
                raise IncompatibleCheckpointError(
                    state.path or "checkpoint",
                    f"checkpoint {state.path}: {what} variable {i} ({variable.name}) has "
                    f"shape {tuple(array.shape)} in the checkpoint but "
                    f"{tuple(variable.shape)} here (another image_model or network size?)",
                )
        for variable, array in zip(variables, arrays, strict=True):
            variable.assign(array)

    @property
    def beta(self) -> float:
        """Current importance-sampling exponent: β0, annealed to 1 over
        `config.is_anneal_updates` learner updates unless that is None."""
        config = self.config
        if config.is_anneal_updates is None:
            return float(config.is_exponent)
        return linear_schedule(config.is_exponent, 1.0, config.is_anneal_updates, self.updates)

    # The update -----------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One learner update: sample, train, update priorities, maybe copy the target.

        Returns:
            Metrics named as in `METRIC_NAMES`.

        Raises:
            RuntimeError: If replay holds fewer than `config.warmup` sequences.
        """
        if not self.ready:
            raise RuntimeError(
                f"replay holds {len(self.replay)} sequences, fewer than "
                f"the warm-up of {self.config.warmup}"
            )
        keys, batch, probabilities = self.replay.sample(self.config.batch_size)
        weights = importance_weights(probabilities, len(self.replay), self.beta)
        priorities = self.learn(batch, weights)
        self.replay.update_priorities(keys, priorities)
        return self.last_metrics

    def trace(self) -> None:
        """Builds the update's graph now, for batches of `config.batch_size` whole windows.

        Needs no data and changes no state. Otherwise the first `step` builds it (about
        0.6 s at the CartPole preset, 2.7 s at Atari size: benchmarks/RESULTS.md,
        "Start-up"); the distributed learner calls this while its actors start. A batch
        cut shorter (`r2d2_agent.replay.extent`) builds its own graph when first met.
        """
        self._compiled_update()

    def learn(self, batch: dict[str, np.ndarray], is_weights: np.ndarray) -> np.ndarray:
        """One update on a given batch (what `step` does after sampling).

        Args:
            batch: A batch of `config.batch_size` sequences, as `SequenceReplay.sample`
                returns (the update runs on it cut to its extent: `trim_batch`).
            is_weights: Importance-sampling weight per sequence.

        Returns:
            The sequences' new priorities (`last_metrics` holds the update's metrics).

        Raises:
            ValueError: If the batch does not hold `config.batch_size` sequences.
        """
        weights = np.asarray(is_weights, np.float32)
        if weights.shape != (self.config.batch_size,):
            raise ValueError(
                f"learn takes batches of config.batch_size = {self.config.batch_size} "
                f"sequences (one importance weight each), got weights of shape {weights.shape}"
            )
        layout = self._layout
        extent = batch_extent(layout, batch["mask"], batch["burnin_mask"])
        batch = trim_batch(layout, batch, extent)
        arrays = [batch[name] for name in self._fields]
        loss, priorities, mean_q = self._compiled_update(extent)(
            *arrays, weights, self._take_new_rewards()
        )
        priorities = priorities.numpy()
        self.updates += 1
        interval = self.config.target_update_interval
        if interval > 1 and self.updates % interval == 0:  # at 1 the update needs no copy
            self.update_target()
        self.last_metrics = {
            "loss": float(loss),
            "mean_q": float(mean_q),
            "mean_priority": float(priorities.mean()),
        }
        return priorities

    @property
    def update_traces(self) -> int:
        """How many times the update's graph was traced: once per batch extent met
        (`r2d2_agent.replay.extent`), again only after a new optimizer."""
        return sum(int(f.experimental_get_tracing_count()) for f in self._train.values())

    def _compiled_update(self, extent: BatchExtent | None = None) -> Any:
        """The update traced for batches cut to `extent` (None: whole windows), the
        batch's fields as flat arguments, called through `flat_caller`: it skips what a
        `tf.function` does at every call with a dict of arrays, working out the call's
        signature (with the reward merge moved into the graph, about 5% of the agent's
        cycle at `memory_config`), and the concrete function's own binding of the arrays
        to its signature (about 6% more of a `memory_config` run's wall:
        benchmarks/RESULTS.md, "The update's call" and "The update's call, bound
        once")."""
        if extent is None:
            extent = self._whole_extent
        update = self._updates.get(extent)
        if update is None:
            train = tf.function(
                self._flat_train_graph,
                input_signature=self._update_signature(extent),
                autograph=self.online.needs_autograph,
            )
            self._train[extent] = train
            update = self._updates[extent] = flat_caller(train.get_concrete_function())
        return update

    @property
    def _whole_extent(self) -> BatchExtent:
        return BatchExtent(burnin=self.config.burnin, input_length=self.config.input_length)

    def _update_signature(self, extent: BatchExtent | None = None) -> list[Any]:
        """The update's flat inputs for batches cut to `extent` (None: whole windows): the
        batch's fields (`_fields` order), the importance weights and the new rewards'
        moments (`_take_new_rewards`)."""
        size = self.config.batch_size
        spec = self.replay.batch_spec()
        example = {name: np.zeros((0, *shape), dtype) for name, (shape, dtype) in spec.items()}
        if extent is not None:
            example = trim_batch(self._layout, example, extent)
        fields = [
            tf.TensorSpec((size, *example[name].shape[1:]), spec[name][1]) for name in self._fields
        ]
        return [*fields, tf.TensorSpec((size,), tf.float32), tf.TensorSpec((2,), tf.float64)]

    def _take_new_rewards(self) -> np.ndarray:
        """The count and sum of squares of the rewards added since they were last
        merged (then zero), as float64; checked here, since the graphs that merge them
        (`RewardStatistics.merge_in_graph`) take them unchecked."""
        count, sum_square = self._new_rewards
        self._new_rewards = [0, 0.0]
        if count > 0:
            check_reward_moments(count, sum_square / count)
        return np.array([count, sum_square], np.float64)

    def _flat_train_graph(self, *args: Any) -> tuple[Any, Any, Any]:
        """`_train_graph` on flat inputs (`_update_signature`), after merging the new
        rewards' moments into the reward statistics (with `normalize_rewards`)."""
        *fields, weights, new_rewards = args
        stats = self.online.reward_statistics
        if stats is not None:
            stats.merge_in_graph(new_rewards[0], new_rewards[1])
        return self._train_graph(dict(zip(self._fields, fields, strict=True)), weights)

    def _copy_graph(self) -> None:
        pairs = zip(self.target.model.weights, self.online.model.weights, strict=True)
        for target, online in pairs:
            target.assign(online)

    def _reset_average_graph(self) -> None:
        for average, online in zip(
            self.average.model.weights, self.online.model.weights, strict=True
        ):
            average.assign(online)

    def _reset_average_untrained(self) -> None:
        """Copies the online network's untrained weights (the reward statistics) into
        the average's."""
        if self._copy_untrained is None:
            self._copy_untrained = tf.function(
                lambda: self._move_average(only_untrained=True), autograph=False
            )
        self._copy_untrained()

    def _move_average(self, only_untrained: bool = False) -> None:
        """In the update's graph: w̄ ← w̄ + (w - w̄) / H for the trained weights; the
        others (the reward statistics) are copied (with `only_untrained`, only those)."""
        rate = 1.0 / self.config.policy_average_updates
        for average, online in zip(
            self.average.model.weights, self.online.model.weights, strict=True
        ):
            if not online.trainable:
                average.assign(online)
            elif not only_untrained:
                average.assign_add((online - average) * rate)

    def _train_graph(self, batch: dict[str, Any], weights: Any) -> tuple[Any, Any, Any]:
        """All B sequences at once: burn-in without gradient, then L + n steps with it.

        Args:
            batch: A sampled batch (`SequenceReplay.sample`), cut to its extent
                (`trim_batch`: b and L are read from its shapes): `frames`, `obs_mask`,
                `burnin_mask`, `state`, `actions`, `returns`, `bootstrap_discount`,
                `bootstrap_index`, `mask`, and with `enable_prev_action_reward`
                `prev_actions`, `prev_rewards`.
            weights: `(B,)` importance-sampling weights.
        """
        cfg = self.config
        # The batch's extent (its shapes): burn-in b, trained steps L (`trim_batch`).
        b = int(batch["burnin_mask"].shape[1])
        length = int(batch["actions"].shape[1])
        actions = batch["actions"]
        # 0. Stacked observations from the stored frames, as the actor stacked them:
        #    observation p is frames p .. p+S-1, all zeros after the episode's end.
        obs = stack_frames_in_graph(
            batch["frames"], batch["obs_mask"], int(batch["obs_mask"].shape[1]), cfg.input_sequence
        )
        mask = tf.cast(batch["mask"], tf.float32)
        # With normalize_rewards, rewards in units of the reward scale (the root mean
        # square of every reward received): the returns and the previous-reward input.
        stats = self.online.reward_statistics
        scale = stats.scale() if stats is not None else None
        returns = batch["returns"] if scale is None else batch["returns"] / scale
        burn_extra, trained_extra = _split_prev_action_reward(batch, b, scale)
        state = batch["state"]
        online_state = target_state = (state[:, 0], state[:, 1])
        # With γ = 0 (`each_step_scored`) every bootstrap discount γ^K is 0 and the target
        # is the reward alone: the look-ahead steps and (without advantage learning) the
        # target network are not run. The same update up to float rounding (R + 0 · q).
        bootstraps = cfg.gamma > 0.0
        uses_target = bootstraps or cfg.advantage_learning > 0.0
        # With target_update_interval = 1 the target is the online network as it stands
        # before the update (what a copy after every update would hold): its unroll would
        # repeat the online one step for step, so the online Q-values, without gradient,
        # stand in for it (and `learn` copies nothing).
        runs_target = uses_target and cfg.target_update_interval > 1
        if cfg.enable_lstm and b > 0:
            # 1. Burn-in: both networks start from the stored state and unroll the first b
            #    steps; left padding (before the episode start) is masked, so the state
            #    stays the stored one there. No gradient flows into the burn-in.
            burn_obs, burn_mask = obs[:, :b], batch["burnin_mask"] > 0.5
            _, online_state = self.online.unroll(burn_obs, online_state, burn_mask, **burn_extra)
            if runs_target:
                _, target_state = self.target.unroll(
                    burn_obs, target_state, burn_mask, **burn_extra
                )
            online_state = tuple(tf.stop_gradient(s) for s in online_state)
        trained_obs = obs[:, b:]  # (B, L + n, ...): trained steps plus look-ahead
        if not bootstraps:  # the trained steps only
            trained_obs = trained_obs[:, :length]
            trained_extra = {k: v[:, :length] for k, v in trained_extra.items()}
        # 2. Target network over the trained steps and (γ > 0) the n look-ahead ones.
        q_target_all = None
        if runs_target:
            q_target_all, _ = self.target.unroll(trained_obs, target_state, **trained_extra)
        with tf.GradientTape() as tape:
            # 3. Online network over the same steps, with gradient.
            q_online_all, _ = self.online.unroll(trained_obs, online_state, **trained_extra)
            if uses_target and not runs_target:
                q_target_all = tf.stop_gradient(q_online_all)
            q_online = q_online_all[:, :length]
            q_taken = tf.gather(q_online, actions, batch_dims=2)
            # 4. Double-Q n-step target at the bootstrap observation s_{t+K}, rescaled:
            #    y = h(R + γ^K (1 - d) h⁻¹(Q_target(s', argmax_a Q_online(s', a)))).
            #    With advantage learning, less α times the taken action's gap below the
            #    best one (the target network's, at s_t) inside h.
            if bootstraps:
                bootstrap_index = batch["bootstrap_index"]
                q_boot_online = tf.gather(q_online_all, bootstrap_index, batch_dims=1)
                q_boot_target = tf.gather(q_target_all, bootstrap_index, batch_dims=1)
            else:  # γ^K = 0 multiplies them: zeros stand in (h⁻¹(0) = 0)
                q_boot_online = q_boot_target = tf.zeros_like(q_online)
            correction = None
            if cfg.advantage_learning > 0.0:
                gaps = tf_ops.action_gaps(q_target_all[:, :length], actions, cfg.enable_rescaling)
                correction = cfg.advantage_learning * gaps
            y = tf.stop_gradient(
                tf_ops.n_step_targets(
                    returns,
                    batch["bootstrap_discount"],
                    q_boot_online,
                    q_boot_target,
                    cfg.enable_double_dqn,
                    cfg.enable_rescaling,
                    correction,
                )
            )
            td = y - q_taken
            # 5. Importance weights scale each sequence's mean step loss.
            loss = tf_ops.sequence_loss(td, mask, weights, cfg.loss)
        variables = self.online.model.trainable_variables
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        if self.average is not None:
            self._move_average()
        # 6. New priorities: η · max|δ| + (1 - η) · mean|δ| over the valid steps.
        priorities = tf_ops.sequence_priorities(td, mask, cfg.priority_eta)
        mean_q = tf.reduce_sum(q_taken * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
        return loss, priorities, mean_q


def _split_prev_action_reward(
    batch: dict[str, Any], burnin: int, reward_scale: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The previous actions and rewards (divided by `reward_scale` unless it is None) of
    the burn-in and of the trained steps, as `R2D2Network.unroll` keyword arguments
    (empty without them)."""
    if "prev_actions" not in batch:
        return {}, {}
    actions, rewards = batch["prev_actions"], batch["prev_rewards"]
    if reward_scale is not None:
        rewards = rewards / reward_scale
    burn = {"prev_action": actions[:, :burnin], "prev_reward": rewards[:, :burnin]}
    trained = {"prev_action": actions[:, burnin:], "prev_reward": rewards[:, burnin:]}
    return burn, trained


def stack_frames_in_graph(frames: Any, obs_mask: Any, steps: int, input_sequence: int) -> Any:
    """`r2d2_agent.replay.stack_frames` in TensorFlow (the tests check they agree).

    Args:
        frames: `(B, T + S - 1, *frame)` frames in their storage dtype.
        obs_mask: `(B, T)`: 1 for real observations.
        steps: T.
        input_sequence: S.

    Returns:
        `(B, T, S, *frame)` float32 stacked observations, zero where `obs_mask` is 0.
    """
    frames = tf.cast(frames, tf.float32)
    obs = tf.stack([frames[:, k : k + steps] for k in range(input_sequence)], axis=2)
    mask = tf.cast(obs_mask, tf.float32)
    return obs * tf.reshape(
        mask, tf.concat([tf.shape(mask), tf.ones([obs.shape.rank - 2], tf.int32)], 0)
    )
