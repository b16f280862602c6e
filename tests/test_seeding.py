"""`resumed_seed`: where a resumed run's randomness starts."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.math import SEED_LIMIT, resumed_seed


def test_a_fresh_run_starts_from_the_configs_seed():
    assert resumed_seed(7, 0) == 7
    assert resumed_seed(0, 0) == 0


def test_without_a_seed_a_resumed_run_draws_fresh_randomness():
    assert resumed_seed(None, 0) is None
    assert resumed_seed(None, 12_345) is None


def test_a_resumed_run_starts_from_a_seed_of_its_own_the_same_at_every_resume():
    seeds = [resumed_seed(7, steps) for steps in (1, 2, 5_000, 10_000, 10**9)]
    assert len(set(seeds)) == len(seeds) and 7 not in seeds
    assert all(0 <= s < SEED_LIMIT for s in seeds)
    assert [resumed_seed(7, steps) for steps in (1, 2, 5_000, 10_000, 10**9)] == seeds
    assert resumed_seed(8, 5_000) != resumed_seed(7, 5_000)


def test_the_seed_is_numpys_seed_sequence_of_the_seed_and_the_env_steps():
    state = np.random.SeedSequence([7, 5_000]).generate_state(1, np.uint64)
    assert resumed_seed(7, 5_000) == int(state[0]) % 2**31


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10", None])
def test_env_steps_that_are_not_a_count_are_refused_by_value(bad):
    with pytest.raises(ValueError, match="env_steps"):
        resumed_seed(7, bad)
