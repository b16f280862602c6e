"""Tests of `r2d2_agent.networks.keras_net` (the Keras model) and
`r2d2_agent.networks.numpy_net` (its numpy forward pass).

Covers the output shapes for every InputType with and without LSTM and dueling, the
dueling head's mean-zero advantage, the agreement of the numpy forward pass with the
Keras model (weight layout and values), the LSTM mask semantics and pluggable image
models. Networks are tiny so that the whole module runs in a few seconds; each kind of
network is built once per module (`cached_network`).
"""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.compat import keras
from r2d2_agent.config import InputType
from r2d2_agent.image_models import DQNImageModel, ImageModel
from r2d2_agent.networks.keras_net import R2D2Network
from r2d2_agent.networks.numpy_net import NumpyNetwork, weight_layout

NB_ACTIONS = 3
UNITS = 8
FRAME_SHAPES = {
    InputType.VALUES: (4,),
    InputType.GRAY_2ch: (16, 16),
    InputType.GRAY_3ch: (16, 16, 1),
    InputType.COLOR: (16, 16, 3),
}


class TinyImageModel(ImageModel):
    """One small strided convolution; remembers the layers it created."""

    def __init__(self) -> None:
        self.created: list[keras.layers.Layer] = []

    def create_image_model(self, c, enable_lstm):
        conv = keras.layers.Conv2D(4, 3, strides=4, activation="relu", name="tiny_conv")
        flat = keras.layers.Flatten(name="tiny_flatten")
        self.created += [conv, flat]
        if enable_lstm:
            c = keras.layers.TimeDistributed(conv)(c)
            return keras.layers.TimeDistributed(flat)(c)
        return flat(conv(c))


@pytest.fixture(scope="module")
def network_config(make_config):
    """Factory: the tiny config for frames of `input_type` (`FRAME_SHAPES`), with 3 actions,
    2 stacked frames, `UNITS` LSTM units (or none) and a dueling head (or not)."""

    def factory(input_type=InputType.VALUES, lstm=True, dueling=True, **changes):
        return make_config(
            **{
                "input_shape": FRAME_SHAPES[input_type],
                "input_type": input_type,
                "nb_actions": NB_ACTIONS,
                "input_sequence": 2,
                "lstm_units": UNITS if lstm else 0,
                "enable_dueling": dueling,
                "multisteps": 1,
                **changes,
            }
        )

    return factory


@pytest.fixture(scope="module")
def cached_network(network_config):
    """`cached_network(input_type, lstm, dueling)`: a network shared by the module's tests
    (LSTM models take long to build), built with a `TinyImageModel` on first use.

    Tests that depend on weight values set all of them first (`randomize_weights`).
    Returns (config, network, image_model).
    """
    cache = {}

    def get(input_type=InputType.VALUES, lstm=True, dueling=True):
        key = (input_type, lstm, dueling)
        if key not in cache:
            config = network_config(input_type, lstm, dueling)
            image_model = TinyImageModel()
            cache[key] = config, R2D2Network(config, image_model), image_model
        return cache[key]

    return get


def random_obs(config, batch, time, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, time, *config.network_input_shape)).astype(np.float32)


def random_state(batch, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(scale=0.5, size=(batch, 2, UNITS)).astype(np.float32)


def randomize_weights(network, seed=2):
    """Nonzero random weights everywhere (Keras initialises biases to zero)."""
    rng = np.random.default_rng(seed)
    network.set_weights(
        [rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in network.get_weights()]
    )


def all_layers(layer):
    """The layer, and recursively every layer nested in models and wrappers."""
    found = [layer]
    for child in getattr(layer, "layers", []):
        found += all_layers(child)
    if isinstance(getattr(layer, "layer", None), keras.layers.Layer):
        found += all_layers(layer.layer)
    return found


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
@pytest.mark.parametrize("lstm", [True, False], ids=["lstm", "no_lstm"])
@pytest.mark.parametrize("input_type", list(InputType), ids=lambda t: t.name)
def test_output_shapes(cached_network, input_type, lstm, dueling):
    config, network, _ = cached_network(input_type, lstm, dueling)
    obs = random_obs(config, batch=2, time=3)
    state = (np.zeros((2, UNITS), np.float32),) * 2
    q, (h, c) = network.unroll(obs, state)
    assert tuple(q.shape) == (2, 3, NB_ACTIONS)
    if lstm:
        assert tuple(h.shape) == (2, UNITS) and tuple(c.shape) == (2, UNITS)


@pytest.fixture(scope="module")
def dqn_network(network_config):
    """An LSTM network on 36x36 gray frames with the paper's `DQNImageModel`."""
    config = network_config(InputType.GRAY_3ch, input_shape=(36, 36, 1))
    return config, R2D2Network(config, DQNImageModel())


def test_dqn_image_model_output_shape_on_36x36_frames(dqn_network):
    config, network = dqn_network
    q, (h, c) = network.unroll(random_obs(config, 2, 3), (np.zeros((2, UNITS), np.float32),) * 2)
    assert tuple(q.shape) == (2, 3, NB_ACTIONS) and tuple(h.shape) == (2, UNITS)


def test_dqn_image_model_layers_are_in_the_network(dqn_network):
    _, network = dqn_network
    assert {"c1", "c2", "c3"} <= {layer.name for layer in all_layers(network.model)}


@pytest.mark.parametrize(
    ("input_type", "bad_shape"),
    [
        (InputType.GRAY_2ch, (16, 16, 3)),
        (InputType.GRAY_3ch, (16, 16, 3)),
        (InputType.COLOR, (16, 16)),
    ],
)
def test_frame_shape_not_fitting_input_type_raises_naming_both(
    network_config, input_type, bad_shape
):
    """The config already rejects the shape, so no network is built with it."""
    with pytest.raises(ValueError) as info:
        R2D2Network(network_config(input_type, input_shape=bad_shape), TinyImageModel())
    assert input_type.name in str(info.value) and str(bad_shape) in str(info.value)


def find_layer(model, name):
    """The layer called `name`, wherever it is nested in `model`."""
    found = [layer for layer in all_layers(model) if layer.name == name]
    assert len(found) == 1, f"{len(found)} layers named {name!r}"
    return found[0]


def _dueling_head_outputs(network):
    """(value, advantage, Q) of the Q head (features -> Q) on random features."""
    randomize_weights(network)
    head = network.head  # the Q head as its own model (features -> Q)
    probe = keras.Model(
        head.inputs,
        [find_layer(head, "value").output, find_layer(head, "advantage").output, head.outputs[0]],
    )
    features = np.random.default_rng(5).normal(size=(2, 3, UNITS)).astype(np.float32)
    return tuple(np.asarray(x) for x in probe(features))


def test_dueling_q_minus_its_mean_equals_advantage_minus_its_mean(cached_network):
    _, network, _ = cached_network()
    _, advantage, q = _dueling_head_outputs(network)
    np.testing.assert_allclose(
        q - q.mean(-1, keepdims=True), advantage - advantage.mean(-1, keepdims=True), atol=1e-5
    )


def test_dueling_q_mean_equals_the_value(cached_network):
    _, network, _ = cached_network()
    value, _, q = _dueling_head_outputs(network)
    np.testing.assert_allclose(q.mean(-1, keepdims=True), value, atol=1e-5)


def test_dueling_q_is_unchanged_by_a_constant_added_to_the_advantage_bias(cached_network):
    config, network, _ = cached_network()
    randomize_weights(network)
    obs, state = random_obs(config, 2, 3), tuple(random_state(2).transpose(1, 0, 2))
    before = network.unroll(obs, state)[0].numpy()
    bias = find_layer(network.model, "advantage").bias
    bias.assign(bias + 5.0)
    after = network.unroll(obs, state)[0].numpy()
    np.testing.assert_allclose(after, before, atol=1e-5)


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
@pytest.mark.parametrize("lstm", [True, False], ids=["lstm", "no_lstm"])
def test_weight_layout_matches_keras_weights(cached_network, lstm, dueling):
    config, network, _ = cached_network(lstm=lstm, dueling=dueling)
    model = network.model
    keras_layout = [
        (w.name.split(":")[0].replace("lstm_cell/", ""), tuple(w.shape)) for w in model.weights
    ]
    assert weight_layout(config) == keras_layout
    assert [tuple(w.shape) for w in model.get_weights()] == [s for _, s in keras_layout]


@pytest.mark.parametrize(
    ("lstm", "dueling"),
    [(True, True), (True, False), (False, True)],
    ids=["lstm_dueling", "lstm_plain", "no_lstm_dueling"],
)
def test_numpy_step_by_step_equals_keras_unroll(cached_network, lstm, dueling):
    config, network, _ = cached_network(lstm=lstm, dueling=dueling)
    randomize_weights(network)
    numpy_net = NumpyNetwork(config, network.get_weights())
    obs, state = random_obs(config, batch=2, time=5), random_state(2)
    q_keras, (h, c) = network.unroll(obs, (state[:, 0], state[:, 1]))
    np_state = state
    for t in range(5):
        q_t, np_state = numpy_net.step(obs[:, t], np_state)
        np.testing.assert_allclose(q_t, q_keras.numpy()[:, t], atol=1e-5)
    if lstm:
        np.testing.assert_allclose(np_state[:, 0], h.numpy(), atol=1e-5)
        np.testing.assert_allclose(np_state[:, 1], c.numpy(), atol=1e-5)


def test_masked_steps_keep_the_lstm_state(cached_network):
    config, network, _ = cached_network()
    randomize_weights(network)
    obs, state = random_obs(config, 2, 4), random_state(2)
    state = (state[:, 0], state[:, 1])
    mask = np.array([[False, False, True, True]] * 2)
    q_masked, (h_masked, c_masked) = network.unroll(obs, state, mask)
    q_short, (h_short, c_short) = network.unroll(obs[:, 2:], state)
    np.testing.assert_allclose(q_masked.numpy()[:, 2:], q_short.numpy(), atol=1e-5)
    np.testing.assert_allclose(h_masked.numpy(), h_short.numpy(), atol=1e-5)
    np.testing.assert_allclose(c_masked.numpy(), c_short.numpy(), atol=1e-5)


def test_unroll_equals_the_keras_lstm_layer_path(cached_network):
    """`unroll` may run the LSTM cell step by step; it must match the model's LSTM layer."""
    config, network, _ = cached_network()
    randomize_weights(network)
    obs, state = random_obs(config, 2, 4), random_state(2)
    mask = np.array([[False, True, True, True], [True, True, False, True]])
    q_unroll, (h_unroll, c_unroll) = network.unroll(obs, (state[:, 0], state[:, 1]), mask)
    q_layer, h_layer, c_layer = network.model([obs, mask, state[:, 0], state[:, 1]])
    # Q at masked steps is never used (and Keras emits zeros before the first valid step).
    np.testing.assert_allclose(q_unroll.numpy()[mask], q_layer.numpy()[mask], atol=1e-5)
    np.testing.assert_allclose(h_unroll.numpy(), h_layer.numpy(), atol=1e-5)
    np.testing.assert_allclose(c_unroll.numpy(), c_layer.numpy(), atol=1e-5)


def test_lstm_has_the_weights_and_math_of_keras_lstm_layer(cached_network):
    """The model's LSTM is `RNN(LSTMCell)` (it builds faster); checkpoints and weight
    files of models built with `keras.layers.LSTM` must still fit it: same weight
    names, shapes and order, same outputs."""
    from r2d2_agent.compat import tf

    _, network, _ = cached_network()
    randomize_weights(network)
    ours = network.lstm
    features = np.random.default_rng(3).normal(size=(2, 5, ours.cell.kernel.shape[0]))
    features = tf.constant(features, tf.float32)
    h, c = (tf.constant(s) for s in np.moveaxis(random_state(2), 1, 0))
    reference = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True, name="lstm")
    reference(features, initial_state=[h, c])  # builds it
    assert [w.name for w in reference.weights] == [w.name for w in ours.weights]
    reference.set_weights(ours.get_weights())
    got, want = ours(features, initial_state=[h, c]), reference(features, initial_state=[h, c])
    assert len(got) == len(want) == 3  # sequence, h, c
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_unroll_gradient_does_not_slice_the_features_per_step(cached_network):
    """The step-by-step unroll takes its inputs with one unstack: a slice per step would
    add a `StridedSliceGrad` of the whole (batch, time, dim) features per step to the
    backward pass (time^2 work; benchmarks/RESULTS.md, issue 7.3)."""
    from r2d2_agent.compat import tf

    config, network, _ = cached_network()
    steps = 12
    obs, state = random_obs(config, 2, steps), random_state(2)
    mask = np.ones((2, steps), bool)

    @tf.function
    def grads(obs, h, c, mask):
        with tf.GradientTape() as tape:
            q, _ = network.unroll(obs, (h, c), mask)
            loss = tf.reduce_sum(q)
        return tape.gradient(loss, network.model.trainable_variables)

    graph = grads.get_concrete_function(obs, state[:, 0], state[:, 1], mask).graph
    ops = [op.type for op in graph.get_operations()]
    assert ops.count("StridedSliceGrad") < steps // 2
    assert "Unpack" in ops


def test_all_masked_steps_return_the_initial_state(cached_network):
    config, network, _ = cached_network()
    randomize_weights(network)
    state = random_state(2)
    _, (h, c) = network.unroll(
        random_obs(config, 2, 3), (state[:, 0], state[:, 1]), np.zeros((2, 3), bool)
    )
    np.testing.assert_allclose(h.numpy(), state[:, 0], atol=1e-6)
    np.testing.assert_allclose(c.numpy(), state[:, 1], atol=1e-6)


@pytest.mark.parametrize("lstm", [True, False], ids=["lstm", "no_lstm"])
def test_user_image_model_subclass_is_used(cached_network, lstm):
    _, network, image_model = cached_network(InputType.GRAY_2ch, lstm=lstm)
    layers = all_layers(network.model)
    names = {layer.name for layer in layers}
    assert {"tiny_conv", "tiny_flatten"} <= names
    conv = image_model.created[0]
    assert any(layer is conv for layer in layers)
    weight_ids = {id(w) for w in network.model.trainable_weights}
    assert id(conv.kernel) in weight_ids


def test_image_model_changes_the_output(cached_network):
    config, network, _ = cached_network(InputType.GRAY_2ch)
    randomize_weights(network)
    obs, state = random_obs(config, 1, 2), tuple(random_state(1).transpose(1, 0, 2))
    before = network.unroll(obs, state)[0].numpy()
    conv = find_layer(network.model, "tiny_conv")
    conv.kernel.assign(conv.kernel * 0.0)
    conv.bias.assign(conv.bias * 0.0)
    after = network.unroll(obs, state)[0].numpy()
    assert not np.allclose(before, after)


def test_initial_state_is_zero_with_batch_and_units_shape(cached_network):
    _, network, _ = cached_network()
    state = network.initial_state(3)
    assert state.shape == (3, 2, UNITS) and not state.any()


def test_stacked_gray_frames_become_channels_in_order(network_config):
    """Frame k of the stack must reach channel k of the image the encoder sees."""
    config = network_config(InputType.GRAY_2ch, lstm=False, input_shape=(4, 4))
    seen = {}

    class Probe(ImageModel):
        def create_image_model(self, c, enable_lstm):
            seen["tensor"] = c
            return keras.layers.Flatten()(c)

    network = R2D2Network(config, Probe())
    torso = find_layer(network.model, "image_model_td").layer
    probe = keras.Model(torso.inputs, seen["tensor"])
    frames = np.stack([np.full((4, 4), 51.0), np.full((4, 4), 102.0)])[None].astype(np.float32)
    image = probe(frames).numpy()  # scaled by config.image_scale = 1/255
    assert image.shape == (1, 4, 4, 2)
    np.testing.assert_allclose(image[..., 0], 0.2)
    np.testing.assert_allclose(image[..., 1], 0.4)


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "reward_statistics"])
def test_get_weights_reads_what_keras_get_weights_reads_now(network_config, normalize):
    network = R2D2Network(network_config(normalize_rewards=normalize))
    randomize_weights(network)
    first = network.get_weights()  # traced read, then the same read after a change
    changed = [w + 1.0 for w in first]
    network.set_weights(changed)
    for got, expected in zip(network.get_weights(), network.model.get_weights(), strict=True):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    assert [w.dtype for w in first] == [w.dtype for w in network.model.get_weights()]


def test_get_weights_gives_arrays_the_caller_may_change(network_config):
    network = R2D2Network(network_config())
    weights = network.get_weights()
    weights[0][...] = 7.0
    assert not np.array_equal(network.get_weights()[0], weights[0])
