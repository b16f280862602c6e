"""The `ImageModel` plug-in and the built-in image encoders.

An image model turns image frames into feature vectors. It receives a Keras tensor
`c` and returns one:

* without LSTM: `c` has shape (batch, H, W, ch) and the result (batch, dim);
* with LSTM: `c` has shape (batch, time, H, W, ch) and the result (batch, time, dim)
  (wrap layers in `TimeDistributed`).

`ch` is the number of stacked frames for grayscale input, or stacked frames x colour
channels for colour input (see `InputType`). The values are float32 frames already
multiplied by `R2D2Config.image_scale`: in [0, 1] for uint8 pixels with the default 1/255
(the network's first layer scales them, for acting and learning alike).
"""

from __future__ import annotations

import abc
from typing import Any


class ImageModel(abc.ABC):
    """Base class of image encoders. Subclass it and implement `create_image_model`.

    Attributes:
        autograph: Whether graphs that run this model convert its layers with AutoGraph.
            True (the default) lets a custom layer's `call` branch or loop in Python on
            tensor values. A model built only from Keras layers and TensorFlow ops may
            set False: the learner then traces its update without AutoGraph, in about
            half the time (the built-in models do).
    """

    autograph: bool = True

    @abc.abstractmethod
    def create_image_model(self, c: Any, enable_lstm: bool) -> Any:
        """Builds the encoder on a Keras tensor.

        Args:
            c: Keras float32 tensor in [0, 1] (for uint8 pixels and the default
                `image_scale`), (batch, H, W, ch) or, with `enable_lstm`, (batch, time, H, W, ch).
            enable_lstm: Whether the tensor carries a time axis.

        Returns:
            A Keras tensor of shape (batch, dim), or (batch, time, dim) with `enable_lstm`.
        """


def _conv_stack(c: Any, enable_lstm: bool, layers: list[Any]) -> Any:
    from r2d2_agent.compat import keras

    wrap = keras.layers.TimeDistributed if enable_lstm else (lambda layer: layer)
    for layer in layers:
        c = wrap(layer)(c)
    return wrap(keras.layers.Flatten())(c)


class DQNImageModel(ImageModel):
    """The Nature-DQN torso (Mnih et al. 2015): three ReLU convolutions, as in R2D2."""

    autograph = False

    def create_image_model(self, c: Any, enable_lstm: bool) -> Any:
        from r2d2_agent.compat import keras

        conv = keras.layers.Conv2D
        return _conv_stack(
            c,
            enable_lstm,
            [
                conv(32, (8, 8), strides=(4, 4), padding="valid", activation="relu", name="c1"),
                conv(64, (4, 4), strides=(2, 2), padding="valid", activation="relu", name="c2"),
                conv(64, (3, 3), strides=(1, 1), padding="valid", activation="relu", name="c3"),
            ],
        )


class R2D3ImageModel(ImageModel):
    """The residual torso of R2D3 / IMPALA (Espeholt et al. 2018): three stages of
    conv + max-pool + two residual blocks, with 16, 32 and 32 channels."""

    autograph = False

    def __init__(self, channels: tuple[int, ...] = (16, 32, 32)) -> None:
        """Args:
        channels: output channels of each stage.
        """
        self.channels = tuple(int(ch) for ch in channels)

    def create_image_model(self, c: Any, enable_lstm: bool) -> Any:
        from r2d2_agent.compat import keras

        layers = keras.layers
        wrap = layers.TimeDistributed if enable_lstm else (lambda layer: layer)
        for i, ch in enumerate(self.channels):
            c = wrap(layers.Conv2D(ch, 3, padding="same", name=f"s{i}_conv"))(c)
            c = wrap(layers.MaxPooling2D(3, strides=2, padding="same"))(c)
            for j in range(2):
                skip = c
                c = layers.Activation("relu")(c)
                c = wrap(layers.Conv2D(ch, 3, padding="same", name=f"s{i}_r{j}a"))(c)
                c = layers.Activation("relu")(c)
                c = wrap(layers.Conv2D(ch, 3, padding="same", name=f"s{i}_r{j}b"))(c)
                c = layers.Add()([c, skip])
        c = layers.Activation("relu")(c)
        return wrap(layers.Flatten())(c)
