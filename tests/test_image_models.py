"""The built-in image torsos (`DQNImageModel`, `R2D3ImageModel`) for every image
`InputType`, with and without LSTM: the learner's network and the actor's policy build
from them, give Q-values of the right shape, and agree on the same uint8 frames."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.compat import keras, tf
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.image_models import DQNImageModel, ImageModel, R2D3ImageModel
from r2d2_agent.networks import KerasPolicy
from r2d2_agent.networks.keras_net import R2D2Network
from r2d2_agent.roles.builder import R2D2Builder

FRAMES = {  # the smallest frames the DQN torso's convolutions accept are 36x36
    InputType.GRAY_2ch: (36, 36),
    InputType.GRAY_3ch: (36, 36, 1),
    InputType.COLOR: (36, 36, 3),
}
TORSOS = {"dqn": DQNImageModel, "r2d3": lambda: R2D3ImageModel(channels=(8, 8))}


def config_for(input_type: InputType, lstm: bool) -> R2D2Config:
    return R2D2Config(
        input_shape=FRAMES[input_type],
        nb_actions=4,
        input_type=input_type,
        input_sequence=2,
        lstm_units=16 if lstm else 0,
        dense_units=16,
        burnin=1,
        input_length=2,
        multisteps=1,
        batch_size=2,
        memory_capacity=8,
        seed=0,
    )


CASES = [
    pytest.param(
        input_type, lstm, torso, id=f"{input_type.name}-{'lstm' if lstm else 'ff'}-{torso}"
    )
    for input_type in FRAMES
    for lstm in (True, False)
    for torso in TORSOS
]


@pytest.mark.parametrize(("input_type", "lstm", "torso"), CASES)
def test_acting_and_learning_networks_agree_on_uint8_frames(input_type, lstm, torso):
    config = config_for(input_type, lstm)
    policy = KerasPolicy(config, TORSOS[torso]())
    network = R2D2Network(config, TORSOS[torso]())
    network.set_weights(policy.network.get_weights())
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 1, *config.network_input_shape), dtype=np.uint8)
    state = np.zeros((3, 2, config.lstm_units), np.float32)
    acted, _ = policy.step(frames[:, 0], state)
    zeros = np.zeros((3, config.lstm_units), np.float32)
    learned, _ = network.unroll(frames.astype(np.float32), (zeros, zeros))
    assert acted.shape == (3, config.nb_actions)
    np.testing.assert_allclose(acted, learned.numpy()[:, 0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("input_type", list(FRAMES))
@pytest.mark.parametrize("torso", list(TORSOS))
def test_a_frame_that_does_not_fit_the_input_type_is_refused_naming_both(input_type, torso):
    wrong = (36, 36, 2) if input_type is not InputType.COLOR else (36, 36)
    with pytest.raises(
        ValueError, match=rf"observation shape .* does not fit input_type {input_type.name}"
    ):
        config_for(input_type, True).replace(input_shape=wrong)


class BranchingImageModel(ImageModel):
    """A user's torso whose layer branches in Python on a tensor's value."""

    class Flip(keras.layers.Layer):
        def call(self, x):
            if tf.reduce_sum(x) > 0:  # needs AutoGraph inside a tf.function
                return x
            return -x

    def create_image_model(self, c, enable_lstm):
        flat = keras.layers.Flatten()
        if enable_lstm:
            return self.Flip()(keras.layers.TimeDistributed(flat)(c))
        return self.Flip()(flat(c))


def test_a_user_image_model_that_branches_on_tensors_trains():
    """The update graph skips AutoGraph for the built-in layers (it halves tracing) but
    keeps it for a user's image model (`ImageModel.autograph` defaults to True)."""
    config = config_for(InputType.GRAY_3ch, lstm=True)
    learner = R2D2Builder(config, image_model=BranchingImageModel()).make_learner()
    learner.trace()
    assert learner.update_traces == 1


@pytest.mark.parametrize("torso", list(TORSOS))
def test_the_built_in_torsos_are_traced_without_autograph(torso):
    config = config_for(InputType.GRAY_3ch, lstm=True)
    assert not R2D2Network(config, TORSOS[torso]()).needs_autograph
    assert R2D2Network(config, BranchingImageModel()).needs_autograph
