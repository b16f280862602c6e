"""An LSTM cell unrolled over a sequence of known length in the graph, with the input
projection of every step in one matrix product.

`keras.layers.LSTMCell` computes `x_t W + h_{t-1} U + b` at every step: two products, and
a read of each of its three weights, per step. The input part does not depend on the
recurrence, so `unroll_lstm_cell` computes it for all steps at once (one `(B·T, F) x
(F, 4H)` product with the bias added) and leaves one `h_{t-1} U` product per step; the
gradient of `W` is then one product too, instead of one per step summed. Same math and
weights as the cell (Keras's gate order i, f, c, o; sigmoid gates, tanh cell), the same
outputs up to float rounding (tests/test_lstm_unroll.py). The learner's update takes
0.86x the CPU time at `memory_config`'s 64-step window, 0.88x at the masked-CartPole
preset (`benchmarks/bench_lstm_unroll.py`; benchmarks/RESULTS.md, "The LSTM's input
projection once per sequence").
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.compat import keras, tf

__all__ = ["unroll_lstm_cell"]


def unroll_lstm_cell(
    cell: keras.layers.LSTMCell, features: Any, state: tuple[Any, Any], mask: Any = None
) -> tuple[Any, tuple[Any, Any]]:
    """Runs `cell` over `features`, step by step in the graph.

    Args:
        cell: A built Keras `LSTMCell` with its default activations (sigmoid gates,
            tanh cell) and no dropout: its `kernel`, `recurrent_kernel` and `bias` are
            used.
        features: `(B, T, F)` float32 inputs; `T` must be known.
        state: `(h, c)`, each `(B, H)`.
        mask: Optional `(B, T)` bool; at a False step the state is carried over
            unchanged (and the output is the carried `h`).

    Returns:
        `(outputs, (h, c))`: the `(B, T, H)` output of every step and the final state.

    Raises:
        ValueError: If the cell has other activations, dropout or no bias, or `T` is not
            known.
    """
    _check_cell(cell)
    steps = features.shape[1]
    if steps is None:
        raise ValueError("unroll_lstm_cell needs sequences of known length (time axis None)")
    units = cell.units
    width = features.shape[-1]
    # One product for every step's input part, the bias added once.
    projected = tf.matmul(tf.reshape(features, [-1, width]), cell.kernel) + cell.bias
    projected = tf.reshape(projected, [-1, steps, 4 * units])
    # One unstack, not a slice per step: the gradient of `x[:, t]` is a zero-padded
    # (B, T, 4H) tensor per step, summed over the steps (time^2 work); the gradient of
    # `tf.unstack` is one stack (benchmarks/RESULTS.md, issue 7.3).
    inputs = tf.unstack(projected, num=steps, axis=1)
    keeps = None if mask is None else tf.unstack(mask[:, :, None], num=steps, axis=1)
    recurrent = tf.convert_to_tensor(cell.recurrent_kernel)  # read once, not per step
    h, c = (tf.convert_to_tensor(s, tf.float32) for s in state)
    outputs = []
    for t in range(steps):
        gates = inputs[t] + tf.matmul(h, recurrent)
        i, f, g, o = tf.split(gates, 4, axis=1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        if keeps is None:
            h, c = h_new, c_new
        else:  # masked steps keep the previous state
            h, c = tf.where(keeps[t], h_new, h), tf.where(keeps[t], c_new, c)
        outputs.append(h)
    return tf.stack(outputs, axis=1), (h, c)


def _check_cell(cell: keras.layers.LSTMCell) -> None:
    """The math above is the cell's only with its defaults: checked at trace time."""
    settings = cell.get_config()
    expected = {
        "activation": "tanh",
        "recurrent_activation": "sigmoid",
        "use_bias": True,
        "dropout": 0.0,
        "recurrent_dropout": 0.0,
    }
    differs = {k: settings.get(k) for k, v in expected.items() if settings.get(k) != v}
    if differs:
        raise ValueError(
            f"unroll_lstm_cell runs an LSTMCell with {expected}; this cell has {differs}"
        )
