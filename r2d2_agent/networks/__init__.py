"""The R2D2 network: the Keras model (learning, image acting), a numpy forward pass (value
acting without TensorFlow), the acting `Policy` interface and weight files.

Importing this package does not import TensorFlow; `keras_net`, `KerasPolicy` and
`weights_io` load it when used.
"""

from r2d2_agent.networks.numpy_net import NumpyNetwork, supports_numpy, weight_layout
from r2d2_agent.networks.policies import KerasPolicy, Policy

__all__ = ["KerasPolicy", "NumpyNetwork", "Policy", "supports_numpy", "weight_layout"]

_KERAS = {"DuelingCombine", "MAX_STATIC_UNROLL", "R2D2Network", "State", "build_model"}


def __getattr__(name: str):  # the Keras names load TensorFlow, so only on first use
    if name in _KERAS:
        import importlib

        value = getattr(importlib.import_module("r2d2_agent.networks.keras_net"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent.networks' has no attribute {name!r}")
