"""Tests of `r2d2_agent.compat`: keras-rl2 on TensorFlow 2.16+ through tf-keras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from r2d2_agent import compat
from r2d2_agent.compat import keras, rl_callbacks, rl_core, rl_processors, tf


def test_exports_are_the_expected_modules():
    import rl.callbacks
    import rl.core
    import rl.processors
    import tf_keras

    assert compat.tf is tf and tf.__name__ == "tensorflow"
    assert keras is tf_keras
    assert rl_core is rl.core and rl_callbacks is rl.callbacks and rl_processors is rl.processors
    assert issubclass(rl_core.Agent, object) and hasattr(rl_callbacks, "CallbackList")


def test_tensorflow_keras_is_tf_keras():
    import tensorflow.keras as tk

    assert os.environ["TF_USE_LEGACY_KERAS"] in ("1", "true", "True")
    assert tk.Model is keras.Model
    assert tf.keras.layers.Dense is keras.layers.Dense
    assert keras.__version__.startswith("2.")
    assert tk.__version__ == keras.__version__


def test_eager_execution_is_still_enabled():
    assert tf.executing_eagerly()


def test_rl_agents_is_not_imported():
    assert "rl.agents" not in sys.modules
    assert not any(name.startswith("rl.agents") for name in sys.modules)


def test_enable_gpu_memory_growth_matches_visible_gpus():
    n_gpus = len(tf.config.list_physical_devices("GPU"))
    enabled = compat.enable_gpu_memory_growth()
    # On a GPU machine, GPUs initialised earlier in this process may refuse (a warning is logged).
    assert 0 <= enabled <= n_gpus
    if n_gpus == 0:
        assert enabled == 0


def test_enable_gpu_memory_growth_again_changes_nothing():
    enabled = compat.enable_gpu_memory_growth()
    assert compat.enable_gpu_memory_growth() == enabled


def test_set_global_seed_is_reproducible():
    import random

    def draw():
        return random.random(), np.random.rand(), float(tf.random.uniform(()))

    compat.set_global_seed(123)
    first = draw()
    compat.set_global_seed(123)
    assert draw() == first


def test_set_global_seed_rejects_a_negative_seed():
    with pytest.raises(ValueError):
        compat.set_global_seed(-1)


class _FakeAgent(rl_core.Agent):
    """Minimal agent-like object: what keras-rl's loggers read from the 'model'."""

    metrics_names = ["loss", "mean_q"]

    def forward(self, observation):
        return 0

    def backward(self, reward, terminal):
        return [0.5, np.nan]


def _drive(callbacks, params, nb_episodes=2, steps=3):
    """Call the keras-rl callback protocol the way rl.core.Agent.fit/test do."""
    history = keras.callbacks.History()
    cbs = rl_callbacks.CallbackList([*callbacks, history])
    cbs.set_model(_FakeAgent())
    cbs._set_env(None)
    cbs.set_params(params)
    cbs.on_train_begin()
    total = 0
    for episode in range(nb_episodes):
        cbs.on_episode_begin(episode)
        for t in range(steps):
            cbs.on_step_begin(t)
            cbs.on_action_begin(1)
            cbs.on_action_end(1)
            logs = {
                "action": 1,
                "observation": np.zeros(4, np.float32),
                "reward": 1.0,
                "metrics": [0.5, np.nan],
                "episode": episode,
                "info": {"terminated": False, "truncated": False},
            }
            cbs.on_step_end(t, logs)
            total += 1
        cbs.on_episode_end(
            episode,
            {"episode_reward": np.float32(steps), "nb_episode_steps": steps, "nb_steps": total},
        )
    cbs.on_train_end(logs={"did_abort": False})
    return history


@pytest.fixture
def train_loggers(tmp_path, capsys):
    """Drives keras-rl's three training loggers through 2 episodes of 3 steps.

    Returns (History, what the FileLogger wrote, what was printed).
    """
    path = tmp_path / "log.json"
    history = _drive(
        [
            rl_callbacks.TrainEpisodeLogger(),
            rl_callbacks.TrainIntervalLogger(interval=2),
            rl_callbacks.FileLogger(str(path), interval=1),
        ],
        {"nb_steps": 6},
    )
    return history, json.loads(path.read_text()), capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_keras_history_records_the_episode_rewards(train_loggers):
    history, _, _ = train_loggers
    assert history.history["episode_reward"] == [3.0, 3.0]


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_keras_rl_file_logger_writes_episodes_metrics_and_steps(train_loggers):
    _, data, _ = train_loggers
    assert data["episode"] == [0, 1]
    assert data["loss"] == [0.5, 0.5]
    assert data["nb_steps"] == [3, 6]


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_keras_rl_train_loggers_print_the_run_and_its_episodes(train_loggers):
    _, _, out = train_loggers
    assert "Training for 6 steps" in out and "episode reward:  3.000" in out


def test_keras_rl_test_logger_prints_each_episode(capsys):
    _drive([rl_callbacks.TestLogger()], {"nb_episodes": 2})
    out = capsys.readouterr().out
    assert "Testing for 2 episodes" in out and "Episode 2: reward: 3.000, steps: " in out


def test_keras3_first_gives_clear_import_error():
    code = textwrap.dedent(
        """
        import tensorflow as tf
        try:
            import r2d2_agent.compat
        except ImportError as exc:
            print("IMPORT_ERROR:", exc)
        else:
            print("NO_ERROR")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "IMPORT_ERROR:" in proc.stdout, proc.stdout + proc.stderr
    assert "Keras 3" in proc.stdout
    assert "TensorFlow was imported before r2d2_agent" in proc.stdout
    assert "TF_USE_LEGACY_KERAS=1" in proc.stdout
    assert "import r2d2_agent before" in proc.stdout


def _scaled_sum():
    """A traced function of two flat inputs that also adds to a variable it captures."""
    total = tf.Variable(0.0)

    @tf.function(input_signature=[tf.TensorSpec((3,), tf.float32), tf.TensorSpec((), tf.int32)])
    def scaled_sum(*args):
        values, factor = args
        out = tf.reduce_sum(values) * tf.cast(factor, tf.float32)
        total.assign_add(out)
        return out, values * 2.0

    return scaled_sum.get_concrete_function(), total


def test_flat_caller_gives_what_the_function_gives_and_updates_its_variables():
    function, total = _scaled_sum()
    call = compat.flat_caller(function)
    values = np.array([1.0, 2.0, 3.5])  # float64: converted to the spec's float32
    out, doubled = call(values, np.int64(2))
    expected_out, expected_doubled = function(values.astype(np.float32), np.int32(2))
    assert float(out) == float(expected_out) == 13.0
    assert doubled.dtype == tf.float32 and doubled.numpy().tolist() == [2.0, 4.0, 7.0]
    assert expected_doubled.numpy().tolist() == [2.0, 4.0, 7.0]
    assert float(total.numpy()) == 26.0  # both calls added


def test_flat_caller_names_an_array_of_the_wrong_shape():
    call = compat.flat_caller(_scaled_sum()[0])
    with pytest.raises(ValueError, match=r"args_0 must have shape \(3,\), got \(4,\)"):
        call(np.zeros(4, np.float32), 1)


def test_flat_caller_refuses_a_wrong_number_of_arrays():
    call = compat.flat_caller(_scaled_sum()[0])
    with pytest.raises(TypeError, match="takes 2 arrays, got 1"):
        call(np.zeros(3, np.float32))


def test_flat_caller_calls_the_public_way_on_a_tensorflow_without_call_flat():
    function, total = _scaled_sum()
    calls = []

    class Public:  # a concrete function as a TensorFlow without `_call_flat` would give
        structured_input_signature = function.structured_input_signature
        name = function.name
        captured_inputs = function.captured_inputs

        def __call__(self, *tensors):
            calls.append([t.dtype for t in tensors])
            return function(*tensors)

    out, _ = compat.flat_caller(Public())(np.ones(3), 3)
    assert float(out) == 9.0 and calls == [[tf.float32, tf.int32]]


def test_flat_caller_copies_an_array_of_the_spec_dtype_into_a_tensor_of_its_own():
    values = np.array([1.0, 2.0, 3.0], np.float32)
    tensor = compat._eager_tensor_maker()(values, tf.float32)
    values[0] = 99.0  # the tensor was made from a copy, as tf.convert_to_tensor makes it
    assert tensor.dtype == tf.float32 and tensor.numpy().tolist() == [1.0, 2.0, 3.0]

    @tf.function(input_signature=[tf.TensorSpec((3,), tf.float32)])
    def doubled(values):
        return values * 2.0

    out = compat.flat_caller(doubled.get_concrete_function())(values)
    assert out.numpy().tolist() == [198.0, 4.0, 6.0]


@pytest.mark.parametrize(
    ("array", "dtype"),
    [
        (np.arange(6, dtype=np.int32).reshape(2, 3), tf.int32),
        (np.array([True, False]), tf.bool),
        (np.arange(4, dtype=np.uint8), tf.uint8),
        (np.arange(4, dtype=np.float64), tf.float32),  # converted: the public way
        (np.float32(2.5), tf.float32),  # a numpy scalar: the public way
        ([1, 2], tf.int64),
    ],
)
def test_eager_tensor_maker_makes_what_convert_to_tensor_makes(array, dtype):
    made = compat._eager_tensor_maker()(array, dtype)
    expected = tf.convert_to_tensor(array, dtype=dtype)
    assert made.dtype == expected.dtype == dtype
    assert made.shape == expected.shape
    assert made.numpy().tolist() == expected.numpy().tolist()
