"""`train_until_solved`: the peers' benchmark protocol, for tests and benchmarks.

A greedy evaluation of `eval_episodes` episodes every `eval_interval` training env steps;
"solved" is the first evaluation whose mean return reaches `threshold`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["train_until_solved"]


def train_until_solved(
    agent: Any,
    make_env: Callable[[], Any],
    nb_steps: int,
    eval_interval: int = 2_500,
    eval_episodes: int = 10,
    threshold: float = 475.0,
    eval_seed: int = 1_000,
    stop_when_solved: bool = True,
) -> dict[str, Any]:
    """Trains an `R2D2Agent` in chunks and evaluates it greedily after each chunk.

    This is the protocol of the peer benchmarks (`shared/peers`): a greedy evaluation of
    `eval_episodes` episodes every `eval_interval` training env steps; "solved" is the first
    evaluation whose mean return reaches `threshold`. Each chunk starts a new training
    episode on the same env, which continues its randomness (it is seeded with
    `config.seed` once, by the first chunk). With `config.envs_per_actor = N > 1` the agent
    trains on N envs from `make_env` (env steps of all N count; each chunk continues the
    episodes the last one left running) and evaluates on one.

    Args:
        agent: A compiled `R2D2Agent`.
        make_env: Zero-argument callable returning a gymnasium env (called N + 1 times
            with N envs per actor).
        nb_steps: Training budget in env steps.
        eval_interval: Env steps between evaluations.
        eval_episodes: Episodes per evaluation.
        threshold: Mean return that counts as solved.
        eval_seed: Seed of the evaluation env's first reset.
        stop_when_solved: Stop training at the first solve.

    Returns:
        A dict with `solved_at` (env steps, or None), `solved_wall_s`, `evals` (list of
        (env steps, mean return)), `env_steps` and `wall_s`.
    """
    n = agent.config.envs_per_actor
    train_env = make_env() if n == 1 else [make_env() for _ in range(n)]
    eval_env = make_env()
    eval_env.reset(seed=eval_seed)
    start = time.perf_counter()
    steps = 0
    evals: list[tuple[int, float]] = []
    solved_at: int | None = None
    solved_wall: float | None = None
    while steps < nb_steps:
        chunk = min(eval_interval, nb_steps - steps)
        agent.fit(train_env, nb_steps=chunk, verbose=0)
        steps += chunk
        history = agent.test(eval_env, nb_episodes=eval_episodes, visualize=False, verbose=0)
        mean_return = float(np.mean(history.history["episode_reward"]))
        evals.append((steps, mean_return))
        if mean_return >= threshold and solved_at is None:
            solved_at, solved_wall = steps, time.perf_counter() - start
            if stop_when_solved:
                break
    return {
        "solved_at": solved_at,
        "solved_wall_s": solved_wall,
        "evals": evals,
        "env_steps": steps,
        "wall_s": time.perf_counter() - start,
    }
