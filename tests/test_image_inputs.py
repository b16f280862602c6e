"""Image inputs: stored as uint8 by default, scaled to [0, 1] in the network's first layer,
so that acting and learning see the same values and an `ImageModel` gets [0, 1]."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent
from r2d2_agent.compat import keras
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.envs import check_env_matches_config
from r2d2_agent.image_models import ImageModel
from r2d2_agent.networks import KerasPolicy
from r2d2_agent.networks.keras_net import R2D2Network
from r2d2_agent.roles import R2D2Builder

FRAME = (12, 12)


class Probe(ImageModel):
    """A tiny torso that remembers the tensor it was given."""

    def __init__(self) -> None:
        self.seen = None

    def create_image_model(self, c, enable_lstm):
        self.seen = c
        wrap = keras.layers.TimeDistributed if enable_lstm else (lambda layer: layer)
        c = wrap(keras.layers.Conv2D(4, 3, strides=3, activation="relu"))(c)
        return wrap(keras.layers.Flatten())(c)


def image_config(**changes) -> R2D2Config:
    base = dict(
        input_shape=FRAME,
        nb_actions=3,
        input_type=InputType.GRAY_2ch,
        input_sequence=2,
        lstm_units=8,
        dense_units=8,
        burnin=1,
        input_length=2,
        multisteps=1,
        batch_size=2,
        memory_capacity=8,
        seed=0,
    )
    return R2D2Config(**(base | changes))


def white_frames(batch: int = 1, time: int = 1) -> np.ndarray:
    return np.full((batch, time, 2, *FRAME), 255, np.uint8)


@pytest.mark.parametrize("lstm_units", [8, 0], ids=["lstm", "no_lstm"])
def test_image_model_receives_frames_in_unit_range(lstm_units):
    probe = Probe()
    network = R2D2Network(image_config(lstm_units=lstm_units), probe)
    source = network.encoder if lstm_units else network.encoder.get_layer("image_model_td").layer
    inputs = white_frames() if lstm_units else white_frames()[:, 0]
    seen = keras.Model(source.input, probe.seen)(inputs.astype(np.float32)).numpy()
    assert seen.max() == pytest.approx(1.0)


@pytest.mark.parametrize("lstm_units", [8, 0], ids=["lstm", "no_lstm"])
def test_acting_policy_and_learning_network_agree_on_uint8_frames(lstm_units):
    config = image_config(lstm_units=lstm_units)
    policy = KerasPolicy(config, Probe())
    network = R2D2Network(config, Probe())
    network.set_weights(policy.network.get_weights())
    frames = np.random.default_rng(0).integers(0, 256, (1, 1, 2, *FRAME), dtype=np.uint8)
    state = np.zeros((1, 2, config.lstm_units), np.float32)
    acted, _ = policy.step(frames[:, 0], state)
    zeros = np.zeros((1, config.lstm_units), np.float32)
    learned, _ = network.unroll(frames.astype(np.float32), (zeros, zeros))
    np.testing.assert_allclose(acted, learned.numpy()[:, 0], rtol=1e-5, atol=1e-6)


def test_image_observations_are_stored_as_uint8_by_default():
    builder = R2D2Builder(image_config())
    assert builder.observation_dtype == np.uint8
    assert builder.layout.frame_dtype == np.uint8


def test_value_observations_are_stored_as_float32_by_default():
    builder = R2D2Builder(R2D2Config(input_shape=(4,), nb_actions=2))
    assert builder.observation_dtype == np.float32


def test_image_scale_must_be_positive():
    with pytest.raises(ValueError, match="image_scale"):
        image_config(image_scale=0.0)


def test_float_images_stored_as_uint8_raise_naming_observation_dtype():
    space = gym.spaces.Box(0.0, 1.0, FRAME, np.float32)
    with pytest.raises(ValueError, match="observation_dtype=np.float32"):
        check_env_matches_config(space, gym.spaces.Discrete(3), image_config(), np.uint8)


def test_float_images_pass_when_stored_as_float32():
    space = gym.spaces.Box(0.0, 1.0, FRAME, np.float32)
    check_env_matches_config(space, gym.spaces.Discrete(3), image_config(), np.float32)


class FloatImageEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, FRAME, np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        return np.zeros(FRAME, np.float32), {}

    def step(self, action):
        return np.zeros(FRAME, np.float32), 0.0, True, False, {}


def test_agent_fit_refuses_float_images_with_uint8_storage():
    agent = R2D2Agent(image_config(), image_model=Probe())
    agent.compile()
    with pytest.raises(ValueError, match="stored as uint8"):
        agent.fit(FloatImageEnv(), nb_steps=1, verbose=0)
