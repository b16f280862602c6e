"""The memory tasks of `r2d2_agent.envs.memory`: optimal and random scores, spaces,
seeding, termination against truncation, registration, and a TensorFlow-free load by path."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.envs import (
    MEMORY_ENV_IDS,
    CueRecall,
    NoisyMaskedCartPole,
    RepeatPrevious,
    TMaze,
    normalise_score,
)


def run_episode(env: gym.Env, policy, seed: int) -> tuple[float, int, bool, bool]:
    """Return, steps, and the last step's (terminated, truncated)."""
    obs, info = env.reset(seed=seed)
    history = [obs]
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(history, info))
        history.append(obs)
        total += reward
        steps += 1
        if terminated or truncated:
            return total, steps, terminated, truncated


def tmaze_optimal(history, info):
    obs = history[-1]
    if obs[3] == 1.0:  # junction: turn the way the first observation said
        return 1 + int(np.argmax(history[0][:2]))
    return 0


def cue_optimal(history, info):
    return int(np.argmax(history[0][:-1]))


def repeat_optimal(k):
    def policy(history, info):
        t = len(history) - 1
        return int(np.argmax(history[t - k])) if t >= k else 0

    return policy


@pytest.mark.parametrize(
    ("env", "policy", "steps"),
    [
        (TMaze(length=5), tmaze_optimal, 6),
        (TMaze(length=20), tmaze_optimal, 21),
        (CueRecall(delay=10, symbols=4), cue_optimal, 12),
        (CueRecall(delay=0, symbols=3), cue_optimal, 2),
        (RepeatPrevious(k=4, symbols=4, length=50), repeat_optimal(4), 50),
        (RepeatPrevious(k=1, symbols=2, length=5), repeat_optimal(1), 5),
    ],
)
def test_the_optimal_policy_scores_the_maximum_and_terminates(env, policy, steps):
    for seed in range(5):
        total, n, terminated, truncated = run_episode(env, policy, seed)
        assert total == pytest.approx(env.score_range[1])
        assert (n, terminated, truncated) == (steps, True, False)


@pytest.mark.parametrize(
    ("env", "expected", "tolerance"),
    [
        (TMaze(length=3), 0.0, 0.06),  # a random walk's turn is independent of the cue
        (CueRecall(delay=2, symbols=4), 2 / 4 - 1, 0.06),
        (CueRecall(delay=2, symbols=2), 0.0, 0.06),
        (RepeatPrevious(k=2, symbols=4, length=10), 2 / 4 - 1, 0.03),
    ],
)
def test_a_random_policy_scores_its_expected_return(env, expected, tolerance):
    rng = np.random.default_rng(0)

    def policy(history, info):
        return int(rng.integers(env.action_space.n))

    returns = [run_episode(env, policy, seed)[0] for seed in range(2000)]
    assert np.mean(returns) == pytest.approx(expected, abs=tolerance)


def test_a_wrong_answer_scores_the_minimum():
    env = CueRecall(delay=3, symbols=4)
    total, *_ = run_episode(env, lambda h, info: (info["cue"] + 1) % 4, seed=0)
    assert total == -1.0
    env = RepeatPrevious(k=2, symbols=3, length=8)
    wrong = repeat_optimal(2)
    total, *_ = run_episode(env, lambda h, info: (wrong(h, info) + 1) % 3, seed=0)
    assert total == pytest.approx(-1.0)
    for seed in range(4):  # the other turn at the junction (1 <-> 2); forward before it
        total, *_ = run_episode(
            TMaze(length=2), lambda h, i: tmaze_optimal(h, i) and 3 - tmaze_optimal(h, i), seed
        )
        assert total == -1.0


def test_tmaze_observations_and_truncation():
    env = TMaze(length=3, max_steps=7)
    obs, info = env.reset(seed=1)
    assert obs.shape == (4,) and obs.dtype == np.float32
    assert obs[info["cue"]] == 1.0 and obs.sum() == 1.0
    obs, reward, terminated, truncated, _ = env.step(1)  # a turn before the junction: stay
    assert obs[info["cue"]] == 1.0 and (reward, terminated, truncated) == (0.0, False, False)
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs, [0, 0, 1, 0])  # the corridor hides the cue
    env.step(0)
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs, [0, 0, 0, 1])
    obs, reward, terminated, truncated, _ = env.step(0)  # forward at the junction: stay
    np.testing.assert_array_equal(obs, [0, 0, 0, 1])
    env.step(0)
    obs, reward, terminated, truncated, _ = env.step(0)  # the 7th step: the time limit
    assert (reward, terminated, truncated) == (0.0, False, True)


@pytest.mark.parametrize(
    "env", [TMaze(5), CueRecall(3, 5), RepeatPrevious(2, 3, 6), NoisyMaskedCartPole()]
)
def test_spaces_and_seeding(env):
    def rollout(seed):
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        observations, rewards = [obs], []
        for _ in range(30):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs), obs
            observations.append(obs)
            rewards.append(reward)
            if terminated or truncated:
                obs, _ = env.reset()
                observations.append(obs)
        return np.stack(observations), np.array(rewards)

    first, again, other = rollout(3), rollout(3), rollout(4)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])


def test_noisy_masked_cartpole_adds_seeded_noise_and_truncates_at_500():
    clean = gym.make("CartPole-v1")
    noisy = NoisyMaskedCartPole(gym.make("CartPole-v1"), noise_std=0.1)
    state, _ = clean.reset(seed=5)
    obs, _ = noisy.reset(seed=5)
    noise = obs - state[[0, 2]]
    assert obs.shape == (2,) and 0 < np.abs(noise).max() < 0.5
    assert NoisyMaskedCartPole(noise_std=0.0).reset(seed=5)[0] == pytest.approx(state[[0, 2]])
    assert noisy.score_range == (0.0, 500.0)
    # Balance on the true state (the wrapped env's), so the episode reaches the time limit.
    steps = 0
    while True:
        pole = noisy.unwrapped.state
        _, _, terminated, truncated, _ = noisy.step(int(pole[2] + 0.5 * pole[3] > 0))
        steps += 1
        if terminated or truncated:
            break
    assert (steps, terminated, truncated) == (500, False, True)


def test_registered_ids_make_the_tasks_with_their_arguments():
    env = gym.make(MEMORY_ENV_IDS["TMaze"], length=7)
    assert env.unwrapped.length == 7
    assert env.get_wrapper_attr("score_range") == (-1.0, 1.0)
    env = gym.make(MEMORY_ENV_IDS["RepeatPrevious"], k=3, symbols=5, length=20)
    assert env.observation_space.shape == (5,) and env.action_space.n == 5
    env = gym.make(MEMORY_ENV_IDS["CueRecall"], delay=4)
    assert env.unwrapped.delay == 4
    env = gym.make(MEMORY_ENV_IDS["NoisyMaskedCartPole"], noise_std=0.2)
    assert env.get_wrapper_attr("noise_std") == 0.2
    assert env.get_wrapper_attr("score_range") == (0.0, 500.0)


@pytest.mark.parametrize(
    ("make", "bad"),
    [
        (lambda: TMaze(length=0), "length"),
        (lambda: TMaze(length=5, max_steps=5), "max_steps"),
        (lambda: CueRecall(delay=-1), "delay"),
        (lambda: CueRecall(symbols=1), "symbols"),
        (lambda: RepeatPrevious(k=5, length=5), "length"),
        (lambda: RepeatPrevious(k=0), "k"),
        (lambda: NoisyMaskedCartPole(noise_std=-0.1), "noise_std"),
    ],
)
def test_bad_arguments_name_the_value(make, bad):
    with pytest.raises(ValueError, match=bad):
        make()


def test_normalise_score():
    assert normalise_score(-1.0, (-1.0, 1.0)) == -1.0
    assert normalise_score(500.0, (0.0, 500.0)) == 1.0
    assert normalise_score(22.0, (0.0, 500.0)) == pytest.approx(-0.912)
    with pytest.raises(ValueError, match="score_range"):
        normalise_score(0.0, (1.0, 1.0))


def test_the_module_loads_by_path_without_the_package_or_tensorflow(tmp_path):
    """A peer library's process loads the module by file path; nothing of r2d2_agent or
    TensorFlow comes with it."""
    path = pathlib.Path(__file__).resolve().parent.parent / "r2d2_agent" / "envs" / "memory.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('memory_tasks', {str(path)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "env = m.NoisyMaskedCartPole(); env.reset(seed=0)\n"
        "assert m.TMaze(5).score_range == (-1.0, 1.0)\n"
        "bad = [n for n in sys.modules if n.startswith(('r2d2_agent', 'tensorflow'))]\n"
        "assert not bad, bad\n"
    )
    # Run from a folder where r2d2_agent is not importable (no PYTHONPATH, no editable
    # install: -I isolates from the user's site and the environment variables).
    subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, check=True)
