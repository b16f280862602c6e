"""The R2D2 network: InputType layer -> encoder -> optional LSTM -> dueling or plain head.

One Keras model serves acting and learning. Its inputs always carry a time axis:

* `obs`: (batch, time, input_sequence, *frame) stacked frames;
* with LSTM also `mask` (batch, time) bool -- masked steps carry the recurrent state
  over unchanged (used for the left-padded burn-in of sequences at an episode start) --
  and the recurrent state `h`, `c`, each (batch, lstm_units).

Outputs: Q-values (batch, time, nb_actions) in the network's units (rescaled space when
`enable_rescaling`), and with LSTM the final `h`, `c`.

With `normalize_rewards` the model also holds a `RewardStatistics` layer outside the
graph: the reward count and mean of squares as non-trainable float64 weights
(`reward_statistics/count`, `reward_statistics/mean_square`), last in `get_weights()`,
so they travel with the weights (to the actors, into checkpoints and weight files).

For value inputs the layer names are fixed (`encoder_dense`, `lstm`, `value_hidden`,
`value`, `advantage_hidden`, `advantage`, or `q_hidden`, `q`) so that a numpy forward
pass (`r2d2_agent.networks.numpy_net`) can run the same weights without TensorFlow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r2d2_agent.compat import keras, tf
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.image_models import DQNImageModel, ImageModel
from r2d2_agent.math.reward_scale import REWARD_SCALE_EPS, reward_scale
from r2d2_agent.networks.lstm_unroll import unroll_lstm_cell

__all__ = [
    "MAX_STATIC_UNROLL",
    "DuelingCombine",
    "R2D2Network",
    "RewardStatistics",
    "State",
    "build_model",
]

State = tuple[Any, Any]

MAX_STATIC_UNROLL = 160
"""Sequences up to this many steps are unrolled in the graph; longer ones loop."""


class _TensorOpsLayer(keras.layers.Layer):
    """A layer whose `call` is tensor operations only, with no Python control flow.

    tf-keras runs a subclassed layer's `call` through AutoGraph when it builds a model,
    which has nothing to convert here and writes a /tmp/__autograph_generated_file*.py
    per layer and model that a killed process never removes.
    """

    def _should_use_autograph(self) -> bool:  # tf-keras's switch (Keras 2 `Layer`)
        return False


class DuelingCombine(_TensorOpsLayer):
    """Q = V + A - mean_a(A) (Wang et al. 2016)."""

    def call(self, inputs: list[Any]) -> Any:
        value, advantage = inputs
        return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)


class PrevActionReward(_TensorOpsLayer):
    """The LSTM's input with the previous action and reward: `[features, one_hot(a),
    r]` on the last axis. Action -1 (no previous action: an episode's first step, and
    padding) gives a zero one-hot.

    Args:
        nb_actions: Number of actions (the one-hot's width).
    """

    def __init__(self, nb_actions: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nb_actions = nb_actions

    def call(self, inputs: list[Any]) -> Any:
        features, prev_action, prev_reward = inputs
        one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.nb_actions)
        reward = tf.cast(prev_reward, features.dtype)[..., None]
        return tf.concat([features, one_hot, reward], axis=-1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "nb_actions": self.nb_actions}


class RewardStatistics(_TensorOpsLayer):
    """The rewards seen so far, as two non-trainable float64 weights: `count` and
    `mean_square` (`E[r^2]`). Not part of the model's graph: the learner merges new
    rewards' moments into it (`merge_in_graph`) and divides rewards by `scale()` in its
    update.

    Build it with `create` (its weights are then named `<name>/count` and
    `<name>/mean_square`).
    """

    @classmethod
    def create(cls, name: str = "reward_statistics") -> RewardStatistics:
        """A built layer whose weights carry its name as their scope."""
        layer = cls(name=name, dtype="float64")
        with tf.name_scope(name):
            layer.build(None)
        return layer

    def build(self, input_shape: Any) -> None:
        def scalar(name: str) -> Any:
            return self.add_weight(
                name=name, shape=(), dtype="float64", initializer="zeros", trainable=False
            )

        self.count = scalar("count")
        self.mean_square = scalar("mean_square")
        super().build(input_shape)

    def call(self, inputs: Any) -> Any:
        return inputs  # holds statistics only

    def scale(self) -> Any:
        """`r2d2_agent.math.reward_scale` of the current statistics, as a float32 tensor
        (usable in a graph: it reads the variables when run)."""
        rms = tf.sqrt(self.mean_square)
        ok = tf.logical_and(self.count > 0, rms > REWARD_SCALE_EPS)
        return tf.cast(tf.where(ok, rms, tf.ones_like(rms)), tf.float32)

    def merge_in_graph(self, count: Any, sum_square: Any) -> None:
        """Adds `count` rewards whose squares sum to `sum_square`, as graph ops (the
        learner runs them in its update, and in a graph of their own when it hands out
        or saves weights): the float64 operations of `merge_reward_moments`, in the
        same order, so the same bits.

        Args:
            count: float64 scalar tensor, the new rewards (>= 0; 0 changes nothing).
            sum_square: float64 scalar tensor, the sum of their squares (>= 0). Both are
                unchecked here: the caller checks them (`check_reward_moments`).
        """
        count_a, mean_square_a = self.count.read_value(), self.mean_square.read_value()
        total = count_a + count
        mean_square_b = sum_square / tf.maximum(count, 1.0)  # == sum_square / count if > 0
        stepped = tf.maximum(mean_square_a + (mean_square_b - mean_square_a) * (count / total), 0.0)
        has_new, had_old = count > 0, count_a > 0
        self.count.assign(tf.where(has_new, total, count_a))
        self.mean_square.assign(
            tf.where(has_new, tf.where(had_old, stepped, mean_square_b), mean_square_a)
        )


def _frames_to_image(x: Any, config: R2D2Config, with_time: bool) -> Any:
    """Scales stacked frames (S, H, W[, C]) by `config.image_scale` (uint8 pixels to
    [0, 1]) and reorders them into one image (H, W, channels).

    This is the one place where image inputs are scaled: acting (`KerasPolicy`) and
    learning run the same model, so they see the same values.
    """
    x = keras.layers.Rescaling(config.image_scale, name="image_scale")(x)
    s = config.input_sequence
    lead = (1,) if with_time else ()
    off = len(lead)
    if config.input_type in (InputType.GRAY_2ch, InputType.GRAY_3ch):
        h, w = config.input_shape[:2]
        # (T?, S, H, W[, 1]) -> (T?, S, H, W) -> (T?, H, W, S)
        x = keras.layers.Reshape((-1, s, h, w) if with_time else (s, h, w))(x)
        perm = tuple(i + off for i in (2, 3, 1))
        return keras.layers.Permute(lead + perm)(x)
    h, w, ch = config.input_shape
    # COLOR: (T?, S, H, W, C) -> (T?, H, W, S, C) -> (T?, H, W, S*C)
    perm = tuple(i + off for i in (2, 3, 1, 4))
    x = keras.layers.Permute(lead + perm)(x)
    return keras.layers.Reshape((-1, h, w, s * ch) if with_time else (h, w, s * ch))(x)


def _encoder(obs: Any, config: R2D2Config, image_model: ImageModel | None) -> Any:
    """Per-step features (batch, time, dim) from stacked frames (batch, time, S, ...)."""
    if config.input_type is InputType.VALUES:
        flat = int(np.prod(config.network_input_shape))
        x = keras.layers.Reshape((-1, flat))(obs)
        return keras.layers.Dense(config.dense_units, activation="relu", name="encoder_dense")(x)
    image_model = image_model or DQNImageModel()
    if config.enable_lstm:
        return image_model.create_image_model(_frames_to_image(obs, config, True), True)
    # Without LSTM the image model sees single images; apply it to every time step.
    frame_in = keras.Input(shape=config.network_input_shape, name="frame")
    feat = image_model.create_image_model(_frames_to_image(frame_in, config, False), False)
    torso = keras.Model(frame_in, feat, name="image_model")
    return keras.layers.TimeDistributed(torso, name="image_model_td")(obs)


def _head(x: Any, config: R2D2Config) -> Any:
    dense = keras.layers.Dense
    if config.enable_dueling:
        v = dense(config.dense_units, activation="relu", name="value_hidden")(x)
        v = dense(1, name="value")(v)
        a = dense(config.dense_units, activation="relu", name="advantage_hidden")(x)
        a = dense(config.nb_actions, name="advantage")(a)
        return DuelingCombine(name="dueling")([v, a])
    x = dense(config.dense_units, activation="relu", name="q_hidden")(x)
    return dense(config.nb_actions, name="q")(x)


def build_model(
    config: R2D2Config, image_model: ImageModel | None = None, name: str = "r2d2"
) -> keras.Model:
    """Builds the Keras model described in the module docstring.

    Args:
        config: The agent's configuration.
        image_model: Encoder for image inputs; `DQNImageModel` when None. Ignored for
            `InputType.VALUES`.
        name: The model's name.

    Returns:
        An uncompiled `keras.Model` whose sub-models `encoder` and `head` (and layer
        `lstm`) can also be called on their own.
    """
    obs = keras.Input(shape=(None, *config.network_input_shape), name="obs")
    encoder = keras.Model(obs, _encoder(obs, config, image_model), name="encoder")
    width = config.lstm_units if config.enable_lstm else config.dense_units
    if config.input_type is not InputType.VALUES and not config.enable_lstm:
        width = encoder.output_shape[-1]
    features_in = keras.Input(shape=(None, width), name="features")
    head = keras.Model(features_in, _head(features_in, config), name="head")
    if not config.enable_lstm:
        return _with_reward_statistics(keras.Model(obs, head(encoder(obs)), name=name), config)
    mask = keras.Input(shape=(None,), dtype="bool", name="mask")
    h_in = keras.Input(shape=(config.lstm_units,), name="h")
    c_in = keras.Input(shape=(config.lstm_units,), name="c")
    # `RNN(LSTMCell)` rather than `keras.layers.LSTM`: the same weights (names, order,
    # initial values) and math, built in half the time. `LSTM` registers cuDNN and CPU
    # variants of its whole-sequence loop as it is built (about 0.35 s a model here),
    # and nothing calls that loop up to `MAX_STATIC_UNROLL` steps: `unroll` steps the
    # cell itself (benchmarks/RESULTS.md, "Start-up").
    lstm = keras.layers.RNN(
        keras.layers.LSTMCell(config.lstm_units, name="lstm_cell"),
        return_sequences=True,
        return_state=True,
        name="lstm",
    )
    if not config.enable_prev_action_reward:
        out, h, c = lstm(encoder(obs), initial_state=[h_in, c_in], mask=mask)
        model = keras.Model([obs, mask, h_in, c_in], [head(out), h, c], name=name)
        return _with_reward_statistics(model, config)
    prev_action = keras.Input(shape=(None,), dtype="int32", name="prev_action")
    prev_reward = keras.Input(shape=(None,), name="prev_reward")
    lstm_in = PrevActionReward(config.nb_actions, name="prev_action_reward")(
        [encoder(obs), prev_action, prev_reward]
    )
    out, h, c = lstm(lstm_in, initial_state=[h_in, c_in], mask=mask)
    inputs = [obs, prev_action, prev_reward, mask, h_in, c_in]
    return _with_reward_statistics(keras.Model(inputs, [head(out), h, c], name=name), config)


def _with_reward_statistics(model: keras.Model, config: R2D2Config) -> keras.Model:
    """With `normalize_rewards`, attaches a `RewardStatistics` layer to `model` (tracked
    as one of its layers, after the others: its weights come last in `weights`,
    `get_weights()` and weight files)."""
    if config.normalize_rewards:
        model.reward_statistics = RewardStatistics.create()
    return model


class R2D2Network:
    """A built model plus the call conventions the actor and learner share.

    Args:
        config: The agent's configuration.
        image_model: Encoder for image inputs (see `build_model`).
        name: The Keras model's name.
    """

    def __init__(
        self, config: R2D2Config, image_model: ImageModel | None = None, name: str = "r2d2"
    ) -> None:
        self.config = config
        image_model = image_model or DQNImageModel()
        self.model = build_model(config, image_model, name)
        self.needs_autograph = config.input_type is not InputType.VALUES and image_model.autograph
        """Whether a graph calling this network needs AutoGraph: only when its image
        model asks for it (`ImageModel.autograph`); the other layers are Keras's own,
        and converting them costs time at every trace."""
        self.encoder = self.model.get_layer("encoder")
        self.head = self.model.get_layer("head")
        self.lstm = self.model.get_layer("lstm") if config.enable_lstm else None
        self.prev_action_reward = (
            self.model.get_layer("prev_action_reward") if config.enable_prev_action_reward else None
        )
        self.reward_statistics: RewardStatistics | None = getattr(
            self.model, "reward_statistics", None
        )
        """The reward statistics with `normalize_rewards` (None without)."""
        self._read_weights: Any = None  # `get_weights`' traced read, made on first use

    def unroll(
        self,
        obs: Any,
        state: State,
        mask: Any = None,
        prev_action: Any = None,
        prev_reward: Any = None,
    ) -> tuple[Any, State]:
        """Runs the network over a batch of sequences.

        Args:
            obs: (batch, time, input_sequence, *frame) tensor.
            state: (h, c), each (batch, lstm_units); ignored without LSTM.
            mask: Optional (batch, time) bool; False steps keep the recurrent state.
            prev_action: (batch, time) int, the action before each step (-1: none); needed
                with `enable_prev_action_reward`, ignored otherwise.
            prev_reward: (batch, time) float, the reward before each step; likewise.

        Returns:
            (q, state): Q-values (batch, time, nb_actions) and the final (h, c).
        """
        if not self.config.enable_lstm:
            return self.model(obs), state
        with_prev = self.config.enable_prev_action_reward
        if with_prev and (prev_action is None or prev_reward is None):
            raise ValueError("enable_prev_action_reward needs prev_action and prev_reward")
        steps = obs.shape[1]
        if steps is None or steps > MAX_STATIC_UNROLL:
            if mask is None:
                mask = tf.ones(tf.shape(obs)[:2], dtype=tf.bool)
            extra = [prev_action, prev_reward] if with_prev else []
            q, h, c = self.model([obs, *extra, mask, state[0], state[1]])
            return q, (h, c)
        # Short sequences of known length: unroll the LSTM cell in the graph. On CPU this
        # is much faster than the layer's while-loop (see benchmarks/RESULTS.md).
        features = self.encoder(obs)
        if with_prev:
            features = self.prev_action_reward([features, prev_action, prev_reward])
        outputs, state = unroll_lstm_cell(self.lstm.cell, features, state, mask)
        return self.head(outputs), state

    @property
    def reward_scale(self) -> float:
        """What rewards are divided by (`r2d2_agent.math.reward_scale` of the network's
        reward statistics); 1.0 without `normalize_rewards`."""
        stats = self.reward_statistics
        if stats is None:
            return 1.0
        return reward_scale(float(stats.count.numpy()), float(stats.mean_square.numpy()))

    def initial_state(self, batch_size: int) -> np.ndarray:
        """Zero recurrent state, shape (batch_size, 2, lstm_units)."""
        return np.zeros((batch_size, 2, self.config.lstm_units), np.float32)

    def get_weights(self) -> list[np.ndarray]:
        """All weights as numpy arrays, in Keras order (`model.get_weights()`).

        One traced call reads every variable: Keras's `get_weights` collects the nested
        models' variables and reads them one eager op each, about 0.7 ms for the
        `memory_config` network against about 0.3 ms here (the learner reads its weights
        at every actor sync and every publication; benchmarks/RESULTS.md, "The learner's
        weights read in one call").
        """
        if self._read_weights is None:
            variables = tuple(self.model.weights)
            self._read_weights = tf.function(
                lambda: [tf.identity(v) for v in variables], autograph=False
            )
        return [tensor.numpy() for tensor in self._read_weights()]

    def set_weights(self, weights: list[np.ndarray]) -> None:
        """Sets all weights (same order as `get_weights`)."""
        self.model.set_weights(weights)
