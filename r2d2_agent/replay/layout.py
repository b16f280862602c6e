"""`SequenceLayout`: the shape of one R2D2 training sequence, validated once.

A sequence holds `burnin` observations before its trained window, `input_length` trained
steps and `multisteps` look-ahead observations for the n-step targets of the last trained
steps: `T = burnin + input_length + multisteps` observations. Windows start every `period`
env steps of an episode.

Each observation is a stack of `input_sequence` (S) frames, but a sequence does not store
stacks: it names the `T + S - 1` frames its stacks are made of (`frame_ids`, -1 for the
zero frames before an episode's start), and observation `p` is the stack of frames
`p .. p + S - 1` of that list (`stack_frames`). Frames live once in the replay's frame
store, shared by overlapping windows and stacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.replay.prioritized import FieldSpec

__all__ = ["SequenceLayout", "stack_frames"]


@dataclass(frozen=True)
class SequenceLayout:
    """Shape of one training sequence.

    Attributes:
        frame_shape: Shape of one observation frame, as the env returns it.
        frame_dtype: Storage dtype of frames (uint8 for images).
        input_sequence: Frames stacked into one observation (S), at least 1.
        state_size: LSTM units; 0 without LSTM (the stored state is then `(2, 0)`).
        burnin: Burn-in steps before the trained window, at least 0.
        input_length: Trained steps per sequence, at least 1.
        multisteps: n of the n-step return, at least 1.
        period: Env steps between the starts of adjacent windows, in `[1, input_length]`.
        prev_action_reward: Whether sequences carry each step's previous action and
            reward (`R2D2Config.enable_prev_action_reward`).
        drop_covered_windows: At an episode's end, emit no window whose trained steps an
            earlier window of the episode covers (`R2D2Config.drop_covered_windows`).

    Raises:
        ValueError: On an invalid field; the message names it and its value.
    """

    frame_shape: tuple[int, ...]
    frame_dtype: np.dtype
    input_sequence: int
    state_size: int
    burnin: int
    input_length: int
    multisteps: int
    period: int
    prev_action_reward: bool = False
    drop_covered_windows: bool = False

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(d) for d in self.frame_shape)
        except (TypeError, ValueError):
            raise ValueError(
                f"frame_shape must be a tuple of ints, got {self.frame_shape!r}"
            ) from None
        if any(d < 0 for d in shape):
            raise ValueError(f"frame_shape must not have negative sizes, got {shape}")
        try:
            dtype = np.dtype(self.frame_dtype)
        except TypeError:
            raise ValueError(
                f"frame_dtype must be a numpy dtype, got {self.frame_dtype!r}"
            ) from None
        object.__setattr__(self, "frame_shape", shape)
        object.__setattr__(self, "frame_dtype", dtype)
        for name, minimum in (
            ("input_sequence", 1),
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
    def from_config(cls, config: R2D2Config, frame_dtype: Any = np.float32) -> SequenceLayout:
        """The layout of the sequences an `R2D2Config` trains on.

        Args:
            config: The agent's configuration (already validated).
            frame_dtype: Storage dtype of frames.
        """
        return cls(
            frame_shape=config.input_shape,
            frame_dtype=np.dtype(frame_dtype),
            input_sequence=config.input_sequence,
            state_size=config.state_size,
            burnin=config.burnin,
            input_length=config.input_length,
            multisteps=config.multisteps,
            period=config.period,
            prev_action_reward=config.enable_prev_action_reward,
            drop_covered_windows=config.drop_covered_windows,
        )

    def end_window_starts(self, next_start: int, end: int) -> list[int]:
        """The starts of the windows an episode still emits when it ends.

        Args:
            next_start: The start of the episode's next window (0 when it emitted none;
                a window at `next_start - period` was emitted otherwise).
            end: `E`, the index of the episode's final observation.

        Returns:
            `next_start, next_start + period, ...` below `end` (every window with a real
            step); with `drop_covered_windows`, only those that train a step no earlier
            window of the episode trains (window `q` trains steps `q .. q + L - 1`).
        """
        starts = list(range(next_start, end, self.period))
        if not self.drop_covered_windows:
            return starts
        trained = next_start - self.period + self.input_length if next_start > 0 else 0
        kept = []
        for start in starts:
            if trained >= end:
                break
            kept.append(start)
            trained = start + self.input_length
        return kept

    @property
    def sequence_length(self) -> int:
        """Observations per sequence (T): `burnin + input_length + multisteps`."""
        return self.burnin + self.input_length + self.multisteps

    @property
    def frames_per_sequence(self) -> int:
        """Frames the observations of one sequence are stacked from: `T + S - 1`."""
        return self.sequence_length + self.input_sequence - 1

    @property
    def frame_nbytes(self) -> int:
        """Bytes of one stored frame."""
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.frame_dtype.itemsize

    def field_spec(self) -> FieldSpec:
        """Field name -> `(shape, dtype)` of one sequence's fixed-shape fields.

        * `frame_ids` `(T+S-1,)` int32: the frames the observations are stacked from, by
          the adder's frame ids modulo 2**31 (the replay stores its own frame numbers
          instead); -1 for a zero frame before the episode's start.
        * `obs_mask` `(T,)` float32: 1 where the observation is real (0 after the
          episode's end, where the stacked observation is all zeros).
        * `burnin_mask` `(b,)` float32: 1 where the burn-in observation is real.
        * `state` `(2, state_size)` float32: the recurrent state (h, c) before the first
          real observation.
        * `actions` `(L,)` int32; `returns`, `bootstrap_discount` `(L,)` float32;
          `bootstrap_index` `(L,)` int32, index into the observations after the burn-in
          of the bootstrap observation; `mask` `(L,)` float32, 1 for real steps.
        * with `prev_action_reward`: `prev_actions` `(T,)` int32, the action before each
          observation (-1 where there is none: an episode's first step, padding), and
          `prev_rewards` `(T,)` float32, the reward that came with it (0 where none).
        """
        f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
        length = self.input_length
        extra = {}
        if self.prev_action_reward:
            extra = {
                "prev_actions": ((self.sequence_length,), i32),
                "prev_rewards": ((self.sequence_length,), f32),
            }
        return {
            **extra,
            "frame_ids": ((self.frames_per_sequence,), i32),
            "obs_mask": ((self.sequence_length,), f32),
            "burnin_mask": ((self.burnin,), f32),
            "state": ((2, self.state_size), f32),
            "actions": ((length,), i32),
            "returns": ((length,), f32),
            "bootstrap_discount": ((length,), f32),
            "bootstrap_index": ((length,), i32),
            "mask": ((length,), f32),
        }


def stack_frames(frames: np.ndarray, obs_mask: np.ndarray, input_sequence: int) -> np.ndarray:
    """Rebuilds stacked observations from a sequence's frames (the numpy reference of the
    learner's in-graph stacking).

    Args:
        frames: `(..., T + S - 1, *frame)`: the frames of `frame_ids`, zeros for -1.
        obs_mask: `(..., T)`: 1 for real observations.
        input_sequence: S.

    Returns:
        `(..., T, S, *frame)`: observation `p` stacks frames `p .. p + S - 1`, oldest
        first, and is all zeros where `obs_mask` is 0.
    """
    frames = np.asarray(frames)
    mask = np.asarray(obs_mask)
    steps = mask.shape[-1]
    lead = mask.ndim - 1
    stacks = np.stack(
        [frames[(slice(None),) * lead + (slice(k, k + steps),)] for k in range(input_sequence)],
        axis=lead + 1,
    )
    shape = mask.shape + (1,) * (stacks.ndim - mask.ndim)
    return np.where(mask.reshape(shape) != 0, stacks, np.zeros((), stacks.dtype))
