"""Tests of the multiprocessing implementations of the transport interfaces.

The shared-memory weights channel (`r2d2_agent.distributed.mp.weights_channel`), the
per-actor experience pipes (`...mp.pipes`), the stop flag and run counters
(`...mp.shared_state`).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import struct
import threading
import time

import numpy as np
import pytest

from r2d2_agent.distributed.interfaces import (
    ExperienceReceiver,
    ExperienceSender,
    WeightsPublisher,
    WeightsSubscriber,
)
from r2d2_agent.distributed.messages import ConnectActor, Experience
from r2d2_agent.distributed.mp.pipes import PipeExperienceReceiver, PipeExperienceSender
from r2d2_agent.distributed.mp.shared_state import RunCounters, SharedFlag
from r2d2_agent.distributed.mp.shared_weights import WeightsSpec
from r2d2_agent.distributed.mp.weights_channel import (
    SharedWeightsPublisher,
    SharedWeightsSubscriber,
)

PREFIX = "r2d2t"
CTX = multiprocessing.get_context("spawn")


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave no segment and no child process behind."""
    yield
    gc.collect()
    if os.path.isdir("/dev/shm"):
        mine = f"{PREFIX}_{os.getpid()}_"
        assert [n for n in os.listdir("/dev/shm") if n.startswith(mine)] == []
    assert multiprocessing.active_children() == []


def test_subscriber_pulls_only_newer_weights():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float64)]
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays(arrays), name_prefix=PREFIX)
    subscriber = SharedWeightsSubscriber(publisher.handle)
    try:
        assert subscriber.pull_if_newer() is None and subscriber.version == 0
        assert publisher.publish(arrays) == 1
        got = subscriber.pull_if_newer()
        assert subscriber.version == 1
        for a, b in zip(arrays, got, strict=True):
            np.testing.assert_array_equal(a, b)
        assert subscriber.pull_if_newer() is None
    finally:
        subscriber.close()
        publisher.close()
        publisher.close()  # idempotent


def test_subscriber_reuse_buffers_returns_same_arrays():
    arrays = [np.zeros(3, np.float32)]
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays(arrays), name_prefix=PREFIX)
    subscriber = SharedWeightsSubscriber(publisher.handle, reuse_buffers=True)
    try:
        publisher.publish([np.full(3, 1, np.float32)])
        first = subscriber.pull_if_newer()
        publisher.publish([np.full(3, 2, np.float32)])
        second = subscriber.pull_if_newer()
        assert second[0] is first[0] and (second[0] == 2).all()
    finally:
        subscriber.close()
        publisher.close()


def test_weights_handle_is_picklable_and_rebuilds_subscriber():
    arrays = [np.full((2, 2), 5, np.float32)]
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays(arrays), name_prefix=PREFIX)
    try:
        publisher.publish(arrays)
        handle = pickle.loads(pickle.dumps(publisher.handle))
        subscriber = SharedWeightsSubscriber(handle)
        assert (subscriber.pull_if_newer()[0] == 5).all()
        subscriber.close()
    finally:
        publisher.close()


def test_mp_implementations_satisfy_the_interfaces():
    r, w = CTX.Pipe(duplex=False)
    sender, receiver = PipeExperienceSender(w, SharedFlag(CTX)), PipeExperienceReceiver()
    assert isinstance(sender, ExperienceSender) and isinstance(receiver, ExperienceReceiver)
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays([np.zeros(1)]), name_prefix=PREFIX)
    subscriber = SharedWeightsSubscriber(publisher.handle)
    assert isinstance(publisher, WeightsPublisher) and isinstance(subscriber, WeightsSubscriber)
    subscriber.close()
    publisher.close()
    sender.close()
    receiver.close()
    r.close()


# ---------------------------------------------------------------- pipe channel -------
def test_pipe_channel_moves_batches_and_splits_them():
    stop = SharedFlag(CTX)
    r, w = CTX.Pipe(duplex=False)
    sender, receiver = PipeExperienceSender(w, stop), PipeExperienceReceiver(connections=[r])
    assert sender.send([1, 2, 3]) and sender.send([4])
    assert receiver.receive(2, timeout=1.0) == [1, 2]
    assert receiver.receive(10, timeout=1.0) == [3, 4]
    t0 = time.monotonic()
    assert receiver.receive(10, timeout=0.1) == []
    assert time.monotonic() - t0 >= 0.09
    sender.close()
    assert receiver.receive(10, timeout=0.5) == [] and receiver.connections == 0
    receiver.close()


def test_pipe_sender_back_pressure_timeout_and_stop():
    stop = SharedFlag(CTX)
    r, w = CTX.Pipe(duplex=False)
    sender = PipeExperienceSender(w, stop, poll_interval=0.02)
    small, sent = [b"x" * 1000], 0
    with pytest.raises(TimeoutError, match="still full"):
        for _ in range(1000):
            sender.send(small, timeout=0.2)
            sent += 1
    assert 10 < sent < 200  # bounded by the pipe's buffer, no unbounded growth
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    assert sender.send(small) is False  # blocked until stop, then refused
    assert time.monotonic() - t0 < 2.0
    receiver = PipeExperienceReceiver(connections=[r])
    assert len(receiver.receive(10_000, timeout=1.0)) == sent  # nothing cut or lost
    sender.close()
    receiver.close()


def test_pipe_sender_cut_by_timeout_closes_the_pipe():
    r, w = CTX.Pipe(duplex=False)
    sender = PipeExperienceSender(w, SharedFlag(CTX), poll_interval=0.02)
    with pytest.raises(TimeoutError):
        sender.send([np.zeros(1 << 20, np.uint8)], timeout=0.3)  # nobody reads
    with pytest.raises(BrokenPipeError):
        sender.send([1])
    receiver = PipeExperienceReceiver(connections=[r])
    assert receiver.receive(10, timeout=1.0) == []  # the cut message is dropped, no hang
    assert receiver.connections == 0


def test_pipe_receiver_drops_a_pipe_cut_in_the_middle_of_a_message():
    r, w = CTX.Pipe(duplex=False)
    r2, w2 = CTX.Pipe(duplex=False)
    receiver = PipeExperienceReceiver(connections=[r, r2])
    # what a writer killed mid-message leaves: a length header promising more bytes
    os.write(w.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    w.close()
    w2.send_bytes(pickle.dumps(["ok"]))
    got, t0 = [], time.monotonic()
    while not got and time.monotonic() - t0 < 2:
        got += receiver.receive(10, timeout=0.2)
    assert got == ["ok"]
    assert receiver.receive(10, timeout=0.1) == []
    assert receiver.connections == 1  # the cut pipe is gone, the healthy one stays
    receiver.close()
    w2.close()


def test_pipe_receiver_takes_new_pipes_from_the_control_pipe():
    control_r, control_w = CTX.Pipe(duplex=False)
    receiver = PipeExperienceReceiver(control=control_r)
    r, w = CTX.Pipe(duplex=False)
    control_w.send(ConnectActor(0, r))  # transfers the connection, as to another process
    r.close()
    item = Experience({"obs": np.zeros(2)}, 1.0, 4)
    w.send_bytes(pickle.dumps([item]))
    got, t0 = [], time.monotonic()
    while not got and time.monotonic() - t0 < 5:
        got += receiver.receive(10, timeout=0.5)
    assert len(got) == 1 and receiver.connections == 1
    assert (got[0].priority, got[0].env_steps) == (1.0, 4)
    control_w.close()  # the manager is gone: the learner must notice
    with pytest.raises(RuntimeError, match="manager gone"):
        receiver.receive(10, timeout=0.5)
    receiver.close()
    w.close()
    control_r.close()


def test_counters_sum_actor_steps():
    counters = RunCounters(CTX, 3)
    counters.set_actor_steps(0, 5)
    counters.set_actor_steps(2, 7)
    assert counters.total_steps() == 12
    assert counters.all_actor_steps() == [5, 0, 7]


def test_counters_keep_learner_fields_by_name():
    counters = RunCounters(CTX, 1)
    counters.set_learner(updates=9, version=2, loss=0.5)
    assert counters.learner_value("updates") == 9
    assert counters.learner_value("version") == 2
    assert counters.learner_value("sequences") == 0
    assert counters.loss == 0.5
    with pytest.raises(KeyError, match="not a learner counter"):
        counters.set_learner(update=1)


def test_stop_flag_is_raised_once_set():
    flag = SharedFlag(CTX)
    assert not flag.is_set()
    flag.set()
    assert flag.is_set()
