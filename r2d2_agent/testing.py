"""Testing utilities: the partially observable CartPole, the benchmark protocol, and a sink
that rebuilds what an adder emits.

Importing this module registers `"r2d2_agent/MaskedCartPole-v1"` with Gymnasium.
`train_until_solved` runs the peers' protocol (a greedy 10-episode evaluation every 2,500
training env steps, solved at a mean return of 475). `SequenceRecorder` is a
`SequenceAdder` sink that keeps every record with its observations rebuilt.
"""

from __future__ import annotations

import numpy as np

from r2d2_agent.envs.masked_cartpole import (
    KEPT_INDICES,
    MASKED_CARTPOLE_ID,
    MaskedCartPole,
    make_masked_cartpole,
    register_envs,
)
from r2d2_agent.keras_rl.evaluation import train_until_solved
from r2d2_agent.replay.adder import SequenceRecord
from r2d2_agent.replay.layout import stack_frames

__all__ = [
    "KEPT_INDICES",
    "MASKED_CARTPOLE_ID",
    "MaskedCartPole",
    "SequenceRecorder",
    "make_masked_cartpole",
    "register_envs",
    "train_until_solved",
]


class SequenceRecorder:
    """A `SequenceAdder` sink that keeps each record's fields and rebuilt observations.

    It checks, as records arrive, that every frame comes once and before a record uses it.

    Args:
        input_sequence: S, the frames stacked into one observation.

    Attributes:
        sequences: Per record, its fields plus `obs`, the stacked observations
            `(T, S, *frame)` (`stack_frames` of its frames).
        priorities: Per record, its initial priority.
        frames: Every frame received, by id.
        frame_log: Frame ids in the order they arrived.
    """

    def __init__(self, input_sequence: int = 1) -> None:
        self.input_sequence = input_sequence
        self.sequences: list[dict[str, np.ndarray]] = []
        self.priorities: list[float] = []
        self.frames: dict[int, np.ndarray] = {}
        self.frame_log: list[int] = []

    def __call__(self, record: SequenceRecord) -> None:
        for i, frame in enumerate(record.frames):
            frame_id = record.first_frame + i
            if frame_id in self.frames:
                raise AssertionError(f"frame {frame_id} was sent twice")
            self.frames[frame_id] = np.array(frame)
            self.frame_log.append(frame_id)
        fields = {name: np.array(value) for name, value in record.fields.items()}
        ids = fields["frame_ids"]
        missing = [int(i) for i in ids if i >= 0 and i not in self.frames]
        if missing:
            raise AssertionError(f"the record uses frames {missing} that were not sent before")
        zero = np.zeros_like(self.frames[int(ids.max())])
        frames = np.stack([self.frames[int(i)] if i >= 0 else zero for i in ids])
        fields["obs"] = stack_frames(frames, fields["obs_mask"], self.input_sequence)
        self.sequences.append(fields)
        self.priorities.append(float(record.priority))
