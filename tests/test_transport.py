"""Tests of the multiprocessing implementations of the transport interfaces
(`r2d2_agent.distributed.messages`).

The shared-memory weights channel (`r2d2_agent.distributed.mp.weights_channel`), the
per-actor experience pipes (`r2d2_agent.distributed.mp.pipes`), the stop flag and run
counters (`r2d2_agent.distributed.mp.shared_state`). Every test must leave no segment and
no child process behind (`no_leftovers`).
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import pickle
import struct
import termios
import threading
import time

import numpy as np
import pytest

from r2d2_agent.distributed.messages import (
    ConnectActor,
    Experience,
    ExperienceReceiver,
    ExperienceSender,
    WeightsPublisher,
    WeightsSubscriber,
)
from r2d2_agent.distributed.mp.bootstrap import Pulse
from r2d2_agent.distributed.mp.pipes import PipeExperienceReceiver, PipeExperienceSender
from r2d2_agent.distributed.mp.shared_state import Heartbeats, RunCounters, SharedFlag
from r2d2_agent.distributed.mp.shared_weights import WeightsSpec
from r2d2_agent.distributed.mp.weights_channel import (
    SharedWeightsPublisher,
    SharedWeightsSubscriber,
)
from r2d2_agent.replay import SequenceRecord

pytestmark = pytest.mark.usefixtures("no_leftovers")

PREFIX = "r2d2t"
CTX = multiprocessing.get_context("spawn")


@pytest.fixture
def pipe():
    """A one-way pipe (reader, writer) of the spawn context, both ends closed afterwards."""
    r, w = CTX.Pipe(duplex=False)
    yield r, w
    r.close()
    w.close()


# ---------------------------------------------------------------- weights channel ----
def _publisher(arrays) -> SharedWeightsPublisher:
    return SharedWeightsPublisher(WeightsSpec.from_arrays(arrays), name_prefix=PREFIX)


def test_subscriber_pulls_only_newer_weights():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float64)]
    publisher = _publisher(arrays)
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


def test_publisher_close_is_idempotent():
    publisher = _publisher([np.zeros(3, np.float32)])
    publisher.close()
    publisher.close()


def test_subscriber_reuse_buffers_returns_same_arrays():
    publisher = _publisher([np.zeros(3, np.float32)])
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
    publisher = _publisher(arrays)
    try:
        publisher.publish(arrays)
        handle = pickle.loads(pickle.dumps(publisher.handle))
        subscriber = SharedWeightsSubscriber(handle)
        assert (subscriber.pull_if_newer()[0] == 5).all()
        subscriber.close()
    finally:
        publisher.close()


def test_shared_weights_publisher_and_subscriber_implement_the_weights_interfaces():
    publisher = _publisher([np.zeros(1)])
    subscriber = SharedWeightsSubscriber(publisher.handle)
    try:
        assert isinstance(publisher, WeightsPublisher)
        assert isinstance(subscriber, WeightsSubscriber)
    finally:
        subscriber.close()
        publisher.close()


# ---------------------------------------------------------------- pipe channel -------
def test_pipe_sender_and_receiver_implement_the_experience_interfaces(pipe):
    _, w = pipe
    sender, receiver = PipeExperienceSender(w, SharedFlag(CTX)), PipeExperienceReceiver()
    try:
        assert isinstance(sender, ExperienceSender)
        assert isinstance(receiver, ExperienceReceiver)
    finally:
        sender.close()
        receiver.close()


def test_pipe_channel_moves_batches_and_splits_them_at_max_items(pipe):
    r, w = pipe
    sender = PipeExperienceSender(w, SharedFlag(CTX))
    receiver = PipeExperienceReceiver(connections=[r])
    assert sender.send([1, 2, 3]) and sender.send([4])
    assert receiver.receive(2, timeout=1.0) == [1, 2]
    assert receiver.receive(10, timeout=1.0) == [3, 4]
    sender.close()
    receiver.close()


def test_pipe_receiver_waits_its_timeout_when_nothing_comes(pipe):
    r, w = pipe
    sender = PipeExperienceSender(w, SharedFlag(CTX))
    receiver = PipeExperienceReceiver(connections=[r])
    t0 = time.monotonic()
    assert receiver.receive(10, timeout=0.1) == []
    assert time.monotonic() - t0 >= 0.09
    sender.close()
    receiver.close()


def test_pipe_receiver_drops_a_pipe_whose_sender_closed(pipe):
    r, w = pipe
    sender = PipeExperienceSender(w, SharedFlag(CTX))
    receiver = PipeExperienceReceiver(connections=[r])
    assert sender.send([1])
    assert receiver.receive(10, timeout=1.0) == [1]
    sender.close()
    assert receiver.receive(10, timeout=0.5) == [] and receiver.connections == 0
    receiver.close()


SMALL = [b"x" * 1000]


def _fill(sender: PipeExperienceSender) -> int:
    """Sends small batches until the unread pipe is full; returns how many went through."""
    sent = 0
    with pytest.raises(TimeoutError, match="still full"):
        for _ in range(1000):
            sender.send(SMALL, timeout=0.2)
            sent += 1
    return sent


def test_pipe_sender_times_out_once_the_unread_pipe_is_full(pipe):
    _, w = pipe
    sender = PipeExperienceSender(w, SharedFlag(CTX), poll_interval=0.02)
    sent = _fill(sender)
    assert 10 < sent < 200  # bounded by the pipe's buffer, no unbounded growth
    sender.close()


def test_blocked_pipe_sender_returns_false_once_stop_is_set(pipe):
    _, w = pipe
    stop = SharedFlag(CTX)
    sender = PipeExperienceSender(w, stop, poll_interval=0.02)
    _fill(sender)
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    assert sender.send(SMALL) is False  # blocked until stop, then refused
    assert time.monotonic() - t0 < 2.0
    sender.close()


def test_pipe_back_pressure_cuts_or_loses_no_message(pipe):
    r, w = pipe
    stop = SharedFlag(CTX)
    sender = PipeExperienceSender(w, stop, poll_interval=0.02)
    sent = _fill(sender)  # ends with a timed-out send
    threading.Timer(0.2, stop.set).start()
    assert sender.send(SMALL) is False  # and one refused after blocking
    receiver = PipeExperienceReceiver(connections=[r])
    assert len(receiver.receive(10_000, timeout=1.0)) == sent
    sender.close()
    receiver.close()


def test_pipe_receiver_leaves_what_it_does_not_return_in_the_pipe(pipe):
    """The pipe's kernel buffer is the back-pressure that holds actors to the learner's
    rate limit: a receive of one batch reads that batch's message and not a byte more."""
    r, w = pipe
    for i in range(3):
        w.send_bytes(pickle.dumps([i]))
    one_message = len(pickle.dumps([0])) + 4
    receiver = PipeExperienceReceiver(connections=[r])
    assert receiver.receive(1, timeout=1.0) == [0]
    unread = struct.unpack("i", fcntl.ioctl(r.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    assert unread == 2 * one_message
    assert receiver.receive(10, timeout=1.0) == [1, 2]
    receiver.close()


def _cut_by_timeout(w) -> PipeExperienceSender:
    """A sender whose send of a large batch nobody reads timed out halfway."""
    sender = PipeExperienceSender(w, SharedFlag(CTX), poll_interval=0.02)
    with pytest.raises(TimeoutError):
        sender.send([np.zeros(1 << 20, np.uint8)], timeout=0.3)
    return sender


def test_pipe_sender_cut_by_timeout_refuses_further_sends(pipe):
    _, w = pipe
    sender = _cut_by_timeout(w)
    with pytest.raises(BrokenPipeError):
        sender.send([1])


def test_pipe_receiver_drops_a_message_cut_by_a_sender_timeout(pipe):
    r, w = pipe
    _cut_by_timeout(w)
    receiver = PipeExperienceReceiver(connections=[r])
    assert receiver.receive(10, timeout=1.0) == []  # the cut message is dropped, no hang
    assert receiver.connections == 0


def test_pipe_receiver_is_not_held_by_a_message_written_halfway(pipe):
    """What an actor frozen (SIGSTOP) in the middle of a send leaves: the learner must go
    on (the stall watchdog restarts the actor), and read the message once it completes."""
    r, w = pipe
    payload = pickle.dumps(["first", "second"])
    frame = struct.pack("!i", len(payload)) + payload
    os.write(w.fileno(), frame[:10])
    receiver = PipeExperienceReceiver(connections=[r])
    got: list = []
    reading = threading.Thread(target=lambda: got.append(receiver.receive(10, 0.2)), daemon=True)
    reading.start()
    reading.join(20)
    assert not reading.is_alive(), "receive() waits for the rest of a half-written message"
    assert got == [[]] and receiver.connections == 1
    os.write(w.fileno(), frame[10:])
    assert receiver.receive(10, timeout=5.0) == ["first", "second"]
    receiver.close()


def test_pipe_receiver_reads_large_messages_that_arrive_in_pieces(pipe):
    r, w = pipe
    big = np.arange(1 << 18, dtype=np.int64)  # 2 MB: many pipe buffers
    sender = PipeExperienceSender(w, SharedFlag(CTX), poll_interval=0.01)
    receiver = PipeExperienceReceiver(connections=[r])
    got: list = []
    reading = threading.Thread(
        target=lambda: [got.extend(receiver.receive(10, 0.05)) for _ in range(400) if not got],
        daemon=True,
    )
    reading.start()
    assert sender.send([big, 7], timeout=30) is True
    reading.join(30)
    assert len(got) == 2 and np.array_equal(got[0], big) and got[1] == 7
    receiver.close()


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


@pytest.fixture
def connected_receiver():
    """A receiver that got an actor's pipe through its control pipe, and one item on it.

    Yields (receiver, control writer, what the receiver got).
    """
    control_r, control_w = CTX.Pipe(duplex=False)
    receiver = PipeExperienceReceiver(control=control_r)
    r, w = CTX.Pipe(duplex=False)
    control_w.send(ConnectActor(0, r))  # transfers the connection, as to another process
    r.close()
    record = SequenceRecord({"frame_ids": np.zeros(2, np.int64)}, 1.0, np.zeros((2, 4)), 0)
    w.send_bytes(pickle.dumps([Experience(record, 4)]))
    got, t0 = [], time.monotonic()
    while not got and time.monotonic() - t0 < 5:
        got += receiver.receive(10, timeout=0.5)
    yield receiver, control_w, got
    receiver.close()
    w.close()
    control_w.close()
    control_r.close()


def test_pipe_receiver_takes_new_pipes_from_the_control_pipe(connected_receiver):
    receiver, _, got = connected_receiver
    assert len(got) == 1 and receiver.connections == 1
    assert (got[0].record.priority, got[0].env_steps) == (1.0, 4)


def test_pipe_receiver_raises_once_the_control_pipe_closes(connected_receiver):
    receiver, control_w, _ = connected_receiver
    control_w.close()  # the manager is gone: the learner must notice
    with pytest.raises(RuntimeError, match="manager gone"):
        receiver.receive(10, timeout=0.5)


# ---------------------------------------------------------------- shared state -------
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


def test_counters_reject_an_unknown_learner_field():
    with pytest.raises(KeyError, match="not a learner counter"):
        RunCounters(CTX, 1).set_learner(update=1)


def test_stop_flag_is_raised_once_set():
    flag = SharedFlag(CTX)
    assert not flag.is_set()
    flag.set()
    assert flag.is_set()


# ---------------------------------------------------------------- heartbeats ---------
def test_pulse_beats_in_its_own_slot_only():
    heartbeats = Heartbeats(CTX, 3)
    pulse = Pulse(heartbeats, 1)
    pulse.beat()
    pulse.beat()
    assert [heartbeats.beats(slot) for slot in range(3)] == [0, 2, 0]


def test_pulse_keeps_beating_from_a_thread_while_busy_and_only_then():
    heartbeats = Heartbeats(CTX, 1)
    pulse = Pulse(heartbeats, 0, interval=0.01)
    with pulse.busy("a long operation"):
        with pulse.busy("a nested one"):
            assert heartbeats.busy(0)
        assert heartbeats.busy(0)  # still inside the outer one
        deadline = time.monotonic() + 30
        while heartbeats.beats(0) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # the main thread never beats here
        assert heartbeats.beats(0) >= 5
    assert not heartbeats.busy(0)
    after = heartbeats.beats(0)
    time.sleep(0.1)
    assert heartbeats.beats(0) == after  # silent outside busy sections


def test_parent_resets_a_slot_before_a_child_starts_there():
    heartbeats = Heartbeats(CTX, 1)
    Pulse(heartbeats, 0).beat()
    heartbeats.set_busy(0, True)
    heartbeats.reset(0)
    assert heartbeats.beats(0) == 0 and not heartbeats.busy(0)


def test_a_pulse_crosses_to_a_child_without_its_thread():
    heartbeats = Heartbeats(CTX, 1)
    pulse = Pulse(heartbeats, 0, interval=0.01)
    with pulse.busy("start"):
        state = pulse.__getstate__()
    assert state["_thread"] is None and state["_depth"] == 0
