"""The Atari example's replay is sized from the estimate: the largest that fits in half of
this machine's memory, not a fixed default (fast: imports the example, starts nothing)."""

from __future__ import annotations

import os

import pytest
from script_loading import load_script

from r2d2_agent import InputType, R2D2Config
from r2d2_agent.replay import estimate_replay_bytes


@pytest.fixture(scope="module")
def atari_example():
    return load_script("examples/atari.py", "atari_example")


@pytest.fixture(scope="module")
def cpu_sized_config(atari_example):
    return R2D2Config(
        input_shape=(84, 84),
        nb_actions=4,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        **atari_example.CPU_SIZED,
    )


def half_of_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


def test_default_capacity_is_the_largest_replay_that_fits_in_half_the_memory(
    atari_example, cpu_sized_config
):
    capacity = atari_example.replay_capacity(cpu_sized_config)
    half = half_of_memory()
    assert estimate_replay_bytes(cpu_sized_config.replace(memory_capacity=capacity)) <= half
    assert estimate_replay_bytes(cpu_sized_config.replace(memory_capacity=capacity + 1)) > half


def test_a_requested_capacity_is_kept_even_above_the_config_default(
    atari_example, cpu_sized_config
):
    requested = cpu_sized_config.memory_capacity + 12_345
    assert atari_example.replay_capacity(cpu_sized_config, requested) == requested
