"""The parent's side of starting a child: a Ctrl-C that arrives while a child starts is
neither raised in the middle of the start nor lost, and the child starts with SIGINT held
back until its bootstrap ignores it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from r2d2_agent.distributed.mp.children import signals_deferred


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """The handler a terminal user's Python has (`KeyboardInterrupt`), even if this test
    process was started with SIGINT ignored (e.g. as a background job of a shell)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_during_the_window_is_raised_when_it_ends():
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)


def test_a_ctrl_c_is_not_raised_inside_the_window():
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached_the_end = True
    assert reached_the_end


def test_the_window_restores_the_mask_and_the_handler():
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGINT)
    with signals_deferred():
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
    assert signal.getsignal(signal.SIGINT) is handler


def _report_sigint_blocked(queue) -> None:
    queue.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_a_child_started_in_the_window_starts_with_sigint_blocked():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with signals_deferred():
        child = ctx.Process(target=_report_sigint_blocked, args=(queue,))
        child.start()
    try:
        assert queue.get(timeout=60) is True
    finally:
        child.join(30)
        queue.close()
