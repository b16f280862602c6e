"""Where the seqlock's memory barriers sit in `SharedWeights` (module docstring of
`r2d2_agent.distributed.mp.shared_weights`): the writer fences after making the counter
odd and before making it even; the reader fences after its first counter load and before
its second, so a snapshot is kept only if nothing was written in between, on any CPU."""

from __future__ import annotations

import os

import numpy as np
import pytest

from r2d2_agent.distributed.mp import shared_weights
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec

PREFIX = "r2d2b"


@pytest.fixture
def segment():
    weights = SharedWeights.create(WeightsSpec.from_arrays([np.zeros(4, np.float32)]), PREFIX)
    yield weights
    weights.close()
    weights.unlink()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"{PREFIX}_{os.getpid()}_")]


def test_memory_barrier_can_be_called_repeatedly_from_one_thread():
    for _ in range(3):
        shared_weights.memory_barrier()


def test_publish_fences_after_the_odd_counter_and_before_the_even_one(segment, monkeypatch):
    seen = []

    def spy():
        seen.append((int(segment._header[0]) & 1, float(segment._views[0][0])))

    monkeypatch.setattr(shared_weights, "memory_barrier", spy)
    segment.publish([np.full(4, 5.0, np.float32)])
    # first barrier: counter odd, payload not written; second: counter odd, payload written
    assert seen == [(1, 0.0), (1, 5.0)]
    assert int(segment._header[0]) == 2


def test_read_discards_a_copy_when_a_publish_lands_after_its_first_barrier(segment, monkeypatch):
    segment.publish([np.full(4, 1.0, np.float32)])
    calls = []

    def spy():  # a writer publishes version 2 while the reader is past its first barrier
        calls.append(1)
        if len(calls) == 1:
            monkeypatch.setattr(shared_weights, "memory_barrier", lambda: None)
            segment.publish([np.full(4, 2.0, np.float32)])
            monkeypatch.setattr(shared_weights, "memory_barrier", spy)

    monkeypatch.setattr(shared_weights, "memory_barrier", spy)
    version, arrays = segment.read()
    assert (version, float(arrays[0][0])) == (2, 2.0)


def test_read_discards_a_copy_when_a_publish_lands_before_its_second_barrier(segment, monkeypatch):
    segment.publish([np.full(4, 1.0, np.float32)])
    calls = []

    def spy():  # the copy is done (version 1 data); then version 2 lands
        calls.append(1)
        if len(calls) == 2:
            monkeypatch.setattr(shared_weights, "memory_barrier", lambda: None)
            segment.publish([np.full(4, 2.0, np.float32)])
            monkeypatch.setattr(shared_weights, "memory_barrier", spy)

    monkeypatch.setattr(shared_weights, "memory_barrier", spy)
    version, arrays = segment.read()
    assert (version, float(arrays[0][0])) == (2, 2.0)
    assert len(calls) >= 4  # the first copy was discarded and the read retried
