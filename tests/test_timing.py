"""`TimeSplit`: wall seconds per activity, and the remainder."""

from __future__ import annotations

import time

import pytest

from r2d2_agent.distributed.reports import TimeSplit


def test_measured_block_counts_its_wall_time():
    split = TimeSplit()
    split.start()
    with split.measure("sleeping"):
        time.sleep(0.05)
    split.stop()
    assert 0.05 <= split.seconds["sleeping"] < 0.5


def test_remainder_is_the_total_minus_what_was_measured():
    split = TimeSplit()
    split.start()
    split.add("a", 0.0)
    time.sleep(0.03)
    with split.measure("b"):
        time.sleep(0.02)
    split.stop()
    shares = split.shares("rest")
    assert shares["rest"] == pytest.approx(shares["total"] - shares["b"], abs=0.002)
    assert shares["rest"] >= 0.03


def test_elapsed_stays_fixed_after_stop():
    split = TimeSplit()
    split.start()
    split.stop()
    first = split.elapsed
    time.sleep(0.01)
    assert split.elapsed == first


def test_a_block_that_raises_is_still_counted():
    split = TimeSplit()
    with pytest.raises(RuntimeError), split.measure("failing"):
        raise RuntimeError("boom")
    assert "failing" in split.seconds
