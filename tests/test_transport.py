"""Tests of r2d2_agent.transport: the multiprocessing experience and weights channels."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import threading
import time

import numpy as np
import pytest

from r2d2_agent.transport import (
    ExperienceReceiver,
    ExperienceSender,
    MPChannelHandle,
    SharedWeightsPublisher,
    SharedWeightsSubscriber,
    WeightsPublisher,
    WeightsSubscriber,
    make_mp_channel,
)
from r2d2_agent.weights import WeightsSpec

PREFIX = "r2d2t"


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave no segment and no child process behind."""
    yield
    gc.collect()
    if os.path.isdir("/dev/shm"):
        mine = f"{PREFIX}_{os.getpid()}_"
        assert [n for n in os.listdir("/dev/shm") if n.startswith(mine)] == []
    assert multiprocessing.active_children() == []


def _fill(n_batches: int, maxsize: int):
    handle, receiver = make_mp_channel(maxsize=maxsize)
    sender = handle.make_sender()
    for i in range(n_batches):
        assert sender.send([("item", i)])
    return handle, sender, receiver


def test_send_times_out_when_queue_stays_full():
    handle, sender, receiver = _fill(n_batches=1, maxsize=1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="still full"):
        sender.send([("item", 1)], timeout=0.2)
    assert 0.15 <= time.monotonic() - t0 < 2.0
    assert receiver.receive(10, timeout=5.0) == [("item", 0)]  # the blocked item was not sent
    assert receiver.receive(10, timeout=0.05) == []
    sender.close(drop_pending=True)


def test_send_returns_false_when_stop_is_set_while_blocked():
    handle, sender, receiver = _fill(n_batches=1, maxsize=1)
    timer = threading.Timer(0.2, handle.stop_event.set)
    timer.start()
    t0 = time.monotonic()
    assert sender.send([("item", 1)]) is False  # no timeout: waits until stop
    assert time.monotonic() - t0 < 2.0
    timer.join()
    assert sender.send([("item", 2)]) is False  # already stopped: returns at once
    sender.close()


def _send_batches(handle: MPChannelHandle, batches: list) -> None:
    """Spawn child: rebuilds the sender from the handle, sends, flushes, exits."""
    sender = handle.make_sender()
    for batch in batches:
        if not sender.send(batch, timeout=30.0):
            raise RuntimeError("stopped")
    sender.close()  # joins the feeder thread: all batches are in the pipe


def test_receive_drains_up_to_max_items_without_qsize(monkeypatch):
    handle, receiver = make_mp_channel(maxsize=4)
    batches = [[("seq", 0), ("seq", 1)], [("seq", 2), ("seq", 3)], [("seq", 4), ("seq", 5)]]
    child = multiprocessing.get_context("spawn").Process(
        target=_send_batches, args=(handle, batches)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0

    def no_qsize():
        raise NotImplementedError("qsize is not implemented on macOS")

    monkeypatch.setattr(handle.queue, "qsize", no_qsize)
    assert receiver.receive(5, timeout=5.0) == [("seq", i) for i in range(5)]
    assert receiver.receive(5, timeout=0.05) == [("seq", 5)]  # leftover of the last batch
    assert receiver.receive(5, timeout=0.05) == []
    receiver.close()


def test_receive_waits_up_to_timeout_when_empty():
    handle, receiver = make_mp_channel(maxsize=2)
    t0 = time.monotonic()
    assert receiver.receive(10, timeout=0.2) == []
    assert 0.15 <= time.monotonic() - t0 < 2.0
    receiver.close()


def test_drain_discards_queued_items():
    handle, sender, receiver = _fill(n_batches=3, maxsize=3)
    assert receiver.drain(0.3) == 3
    assert sender.send([("item", 9)], timeout=1.0)  # room again
    sender.close(drop_pending=True)


def test_subscriber_pulls_only_newer_weights():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float64)]
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays(arrays), name_prefix=PREFIX)
    subscriber = publisher.subscriber_handle.make_subscriber()
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
    subscriber = SharedWeightsSubscriber(publisher.subscriber_handle.weights, reuse_buffers=True)
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
        handle = pickle.loads(pickle.dumps(publisher.subscriber_handle))
        subscriber = handle.make_subscriber()
        assert (subscriber.pull_if_newer()[0] == 5).all()
        subscriber.close()
    finally:
        publisher.close()


def test_mp_implementations_satisfy_the_interfaces():
    handle, receiver = make_mp_channel(maxsize=1)
    sender = handle.make_sender()
    assert isinstance(sender, ExperienceSender) and isinstance(receiver, ExperienceReceiver)
    publisher = SharedWeightsPublisher(WeightsSpec.from_arrays([np.zeros(1)]), name_prefix=PREFIX)
    subscriber = publisher.subscriber_handle.make_subscriber()
    assert isinstance(publisher, WeightsPublisher) and isinstance(subscriber, WeightsSubscriber)
    subscriber.close()
    publisher.close()
    sender.close()
    receiver.close()
