"""`SequenceLayout`: the shape of one R2D2 training sequence, validated once.

A sequence holds `burnin` observations before its trained window, `input_length` trained
steps and `multisteps` look-ahead observations for the n-step targets of the last trained
steps. Windows start every `period` env steps of an episode. The adder cuts sequences of
this layout and the replay stores them; both take it from here instead of re-deriving it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.replay.prioritized import FieldSpec

__all__ = ["SequenceLayout"]


@dataclass(frozen=True)
class SequenceLayout:
    """Shape of one training sequence.

    Attributes:
        observation_shape: Shape of one stored observation (the actor's stacked frames,
            `(input_sequence, *frame)`).
        observation_dtype: Storage dtype of observations (e.g. uint8 for images).
        state_size: LSTM units; 0 without LSTM (the stored state is then `(2, 0)`).
        burnin: Burn-in steps before the trained window, at least 0.
        input_length: Trained steps per sequence, at least 1.
        multisteps: N of the n-step return, at least 1.
        period: Env steps between the starts of adjacent windows, in `[1, input_length]`.

    Raises:
        ValueError: On an invalid field; the message names it and its value.
    """

    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    state_size: int
    burnin: int
    input_length: int
    multisteps: int
    period: int

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(d) for d in self.observation_shape)
        except (TypeError, ValueError):
            raise ValueError(
                f"observation_shape must be a tuple of ints, got {self.observation_shape!r}"
            ) from None
        if any(d < 0 for d in shape):
            raise ValueError(f"observation_shape must not have negative sizes, got {shape}")
        try:
            dtype = np.dtype(self.observation_dtype)
        except TypeError:
            raise ValueError(
                f"observation_dtype must be a numpy dtype, got {self.observation_dtype!r}"
            ) from None
        object.__setattr__(self, "observation_shape", shape)
        object.__setattr__(self, "observation_dtype", dtype)
        for name, minimum in (
            ("state_size", 0),
            ("burnin", 0),
            ("input_length", 1),
            ("multisteps", 1),
            ("period", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
            if value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.period > self.input_length:
            raise ValueError(
                f"period={self.period} must not exceed input_length={self.input_length} "
                "(steps would never be trained)"
            )

    @classmethod
    def from_config(cls, config: R2D2Config, observation_dtype: Any = np.float32) -> SequenceLayout:
        """The layout of the sequences an `R2D2Config` trains on.

        Args:
            config: The agent's configuration (already validated).
            observation_dtype: Storage dtype of observations.
        """
        return cls(
            observation_shape=config.network_input_shape,
            observation_dtype=np.dtype(observation_dtype),
            state_size=config.state_size,
            burnin=config.burnin,
            input_length=config.input_length,
            multisteps=config.multisteps,
            period=config.period,
        )

    @property
    def sequence_length(self) -> int:
        """Observations stored per sequence: `burnin + input_length + multisteps`."""
        return self.burnin + self.input_length + self.multisteps

    def field_spec(self) -> FieldSpec:
        """Field name -> `(shape, dtype)` of one sequence, as the adder emits it.

        * `obs` `(b+L+n, *observation_shape)`: the observations.
        * `burnin_mask` `(b,)` float32: 1 where the burn-in observation is real.
        * `state` `(2, state_size)` float32: the recurrent state (h, c) before the first
          real observation.
        * `actions` `(L,)` int32; `returns`, `bootstrap_discount` `(L,)` float32;
          `bootstrap_index` `(L,)` int32, index into `obs[b:]` of the bootstrap
          observation; `mask` `(L,)` float32, 1 for real steps.
        """
        f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
        length = self.input_length
        return {
            "obs": ((self.sequence_length, *self.observation_shape), self.observation_dtype),
            "burnin_mask": ((self.burnin,), f32),
            "state": ((2, self.state_size), f32),
            "actions": ((length,), i32),
            "returns": ((length,), f32),
            "bootstrap_discount": ((length,), f32),
            "bootstrap_index": ((length,), i32),
            "mask": ((length,), f32),
        }
