"""The small sequence layout the adder tests play with (2 frames of 2 values stacked, a
3-value state, burn-in 2, 4 trained steps, 2-step returns, a window every 2 steps)."""

from __future__ import annotations

import numpy as np

from r2d2_agent.replay import SequenceLayout

SMALL_LAYOUT = {
    "frame_shape": (2,),
    "frame_dtype": np.float32,
    "input_sequence": 2,
    "state_size": 3,
    "burnin": 2,
    "input_length": 4,
    "multisteps": 2,
    "period": 2,
}
"""`SequenceLayout`'s arguments; tests override some (`small_layout(**overrides)`)."""


def small_layout(**overrides) -> SequenceLayout:
    """`SMALL_LAYOUT` with `overrides`."""
    return SequenceLayout(**(SMALL_LAYOUT | overrides))
