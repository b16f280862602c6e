"""Replay: the sequence layout, the sequence adder, the sum tree and the replays.

`SequenceAdder` cuts an actor's episodes into overlapping burn-in + trained + look-ahead
sequences with stored recurrent states and initial priorities, naming their frames by id
and handing on each frame once (`SequenceRecord`); `VectorSequenceAdder` does the same for
N envs stepped together, one call per step of all N. `SequenceReplay` stores every frame once
and the sequences' small fields in a `PrioritizedSequenceReplay` (generic fixed-shape
items, a `SumTree` underneath), and rebuilds stacks when sampled; `trim_batch` cuts a
sampled batch to the steps it holds (`batch_extent`) for the learner. Nothing here imports
TensorFlow.
"""

from r2d2_agent.replay.adder import SequenceAdder, SequenceRecord, Sink
from r2d2_agent.replay.env_adders import PerEnvAdders, VectorAdder, make_env_adders
from r2d2_agent.replay.extent import BatchExtent, batch_extent, length_step, trim_batch
from r2d2_agent.replay.layout import SequenceLayout, stack_frames
from r2d2_agent.replay.prioritized import PRIORITY_EPSILON, FieldSpec, PrioritizedSequenceReplay
from r2d2_agent.replay.sequence_replay import SequenceReplay, default_frame_capacity
from r2d2_agent.replay.sizing import (
    available_memory_bytes,
    check_replay_fits,
    estimate_replay_bytes,
    largest_memory_capacity,
    storage_dtype,
)
from r2d2_agent.replay.sum_tree import SumTree
from r2d2_agent.replay.vector_adder import VectorSequenceAdder

__all__ = [
    "PRIORITY_EPSILON",
    "BatchExtent",
    "PerEnvAdders",
    "FieldSpec",
    "PrioritizedSequenceReplay",
    "SequenceAdder",
    "SequenceLayout",
    "SequenceRecord",
    "SequenceReplay",
    "Sink",
    "SumTree",
    "VectorAdder",
    "VectorSequenceAdder",
    "available_memory_bytes",
    "batch_extent",
    "check_replay_fits",
    "default_frame_capacity",
    "estimate_replay_bytes",
    "largest_memory_capacity",
    "length_step",
    "make_env_adders",
    "stack_frames",
    "storage_dtype",
    "trim_batch",
]
