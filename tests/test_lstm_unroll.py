"""`unroll_lstm_cell` against the Keras `LSTMCell` it stands in for, step by step (the
reference is the unroll before stop 52, kept in `benchmarks/bench_lstm_unroll.py`, which
times the two)."""

from __future__ import annotations

import numpy as np
import pytest
from script_loading import load_script

from r2d2_agent.compat import keras, tf
from r2d2_agent.networks.lstm_unroll import unroll_lstm_cell

BATCH, STEPS, FEATURES, UNITS = 3, 6, 5, 4


keras_loop = load_script("benchmarks/bench_lstm_unroll.py", "bench_lstm_unroll").keras_cell_per_step
"""The reference: Keras's own cell called at every step."""


def make_cell(**kwargs) -> keras.layers.LSTMCell:
    """A built cell with random weights (a nonzero bias, so a misplaced one shows)."""
    cell = keras.layers.LSTMCell(UNITS, **kwargs)
    cell.build((BATCH, FEATURES))
    rng = np.random.default_rng(0)
    cell.set_weights([rng.normal(scale=0.7, size=w.shape) for w in cell.get_weights()])
    return cell


def inputs(seed: int = 1) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
    rng = np.random.default_rng(seed)
    features = tf.constant(rng.normal(size=(BATCH, STEPS, FEATURES)), tf.float32)
    h, c = (tf.constant(rng.normal(size=(BATCH, UNITS)), tf.float32) for _ in range(2))
    return features, (h, c)


MASK = np.array(
    [[False, False, True, True, True, True], [True] * 6, [True, True, False, True, False, True]]
)


def outputs_and_gradients(run, cell, mask):
    """The outputs, the final state and the gradients of a loss that weights each of them
    differently, with respect to the inputs, the initial state and the cell's weights."""
    features, (h0, c0) = inputs()
    with tf.GradientTape() as tape:
        tape.watch([features, h0, c0])
        outputs, (h, c) = run(cell, features, (h0, c0), mask)
        weights = tf.range(1.0, STEPS + 1.0)[None, :, None]
        loss = tf.reduce_sum(outputs**2 * weights) + tf.reduce_sum(h * 1.5) - tf.reduce_sum(c)
    grads = tape.gradient(loss, [features, h0, c0, *cell.trainable_variables])
    return [outputs, h, c, *grads]


@pytest.mark.parametrize("mask", [None, MASK], ids=["no_mask", "mask"])
def test_outputs_state_and_gradients_equal_the_keras_cell(mask):
    cell = make_cell()
    ours = outputs_and_gradients(unroll_lstm_cell, cell, mask)
    reference = outputs_and_gradients(keras_loop, cell, mask)
    names = ["outputs", "h", "c", "d features", "d h0", "d c0", "d kernel", "d recurrent", "d bias"]
    for name, a, b in zip(names, ours, reference, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_masked_steps_carry_the_state_over():
    cell = make_cell()
    features, state = inputs()
    outputs, (h, c) = unroll_lstm_cell(cell, features, state, np.zeros((BATCH, STEPS), bool))
    np.testing.assert_array_equal(h.numpy(), state[0].numpy())
    np.testing.assert_array_equal(c.numpy(), state[1].numpy())
    np.testing.assert_array_equal(outputs.numpy()[:, -1], state[0].numpy())


def test_the_graph_reads_each_weight_once_and_projects_the_inputs_in_one_product():
    """The point of the function: one input product for all steps, one recurrent product
    per step, each weight read once (the cell's own call reads all three every step)."""
    cell = make_cell()
    features, (h, c) = inputs()

    @tf.function
    def run(features, h, c):
        return unroll_lstm_cell(cell, features, (h, c))

    ops = [op.type for op in run.get_concrete_function(features, h, c).graph.get_operations()]
    assert ops.count("ReadVariableOp") == 3
    assert ops.count("MatMul") == STEPS + 1


@pytest.mark.parametrize(
    "kwargs",
    [{"activation": "relu"}, {"recurrent_activation": "hard_sigmoid"}, {"dropout": 0.1}],
    ids=["activation", "recurrent_activation", "dropout"],
)
def test_a_cell_with_other_settings_is_refused(kwargs):
    cell = make_cell(**kwargs)
    features, state = inputs()
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        unroll_lstm_cell(cell, features, state)


def test_an_unknown_length_is_refused():
    cell = make_cell()

    @tf.function(input_signature=[tf.TensorSpec((BATCH, None, FEATURES))])
    def run(features):
        return unroll_lstm_cell(cell, features, (tf.zeros((BATCH, UNITS)),) * 2)

    with pytest.raises(ValueError, match="known length"):
        run.get_concrete_function()
