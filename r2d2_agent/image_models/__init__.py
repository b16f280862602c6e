"""Pluggable image encoders: subclass `ImageModel` to use your own convolutional torso."""

from r2d2_agent.image_models.base import DQNImageModel, ImageModel, R2D3ImageModel

__all__ = ["ImageModel", "DQNImageModel", "R2D3ImageModel"]
