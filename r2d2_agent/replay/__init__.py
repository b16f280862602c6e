"""Replay: the sequence layout, the sequence adder, the sum tree and prioritized replay.

`SequenceAdder` cuts an actor's episodes into overlapping burn-in + trained + look-ahead
sequences with stored recurrent states and initial priorities; `PrioritizedSequenceReplay`
stores them and samples in proportion to priority (a `SumTree` underneath). Nothing here
imports TensorFlow.
"""

from r2d2_agent.replay.adder import SequenceAdder, Sink
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.prioritized import PRIORITY_EPSILON, FieldSpec, PrioritizedSequenceReplay
from r2d2_agent.replay.sum_tree import SumTree

__all__ = [
    "PRIORITY_EPSILON",
    "FieldSpec",
    "PrioritizedSequenceReplay",
    "SequenceAdder",
    "SequenceLayout",
    "Sink",
    "SumTree",
]
