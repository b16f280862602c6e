"""Errors that point to the fix: the message of a common mistake says what to write
instead. No process starts in these tests (each mistake is refused in the caller's
process, before any child)."""

from __future__ import annotations

import multiprocessing
import re

import gymnasium as gym
import pytest

from r2d2_agent import R2D2Config, R2D2Manager
from r2d2_agent.replay.sizing import check_replay_fits, estimate_replay_bytes

ATARI = R2D2Config(input_shape=(84, 84, 4), nb_actions=6)  # the paper's 100,000 sequences


def test_an_env_instance_for_the_factory_suggests_a_partial_of_gymnasium_make(make_config):
    env = gym.make("CartPole-v1")
    try:
        with pytest.raises(TypeError) as raised:
            R2D2Manager(env, make_config())
    finally:
        env.close()
    message = str(raised.value)
    assert "an env instance" in message
    assert "functools.partial(gymnasium.make, 'CartPole-v1')" in message
    assert multiprocessing.active_children() == []


def test_a_replay_refusal_suggests_a_capacity_that_leaves_room_for_the_rest():
    available = 2 * 2**30
    with pytest.raises(ValueError) as raised:
        check_replay_fits(ATARI, available=available)
    suggested = int(re.search(r"e\.g\. memory_capacity=(\d+)", str(raised.value)).group(1))
    assert 0 < estimate_replay_bytes(ATARI.replace(memory_capacity=suggested)) <= available / 2
    too_many = ATARI.replace(memory_capacity=suggested + 1)  # the largest that fits
    assert estimate_replay_bytes(too_many) > available / 2
