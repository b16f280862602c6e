"""Where a T-maze run is stuck: the greedy walk and the Q-values at the junction.

Trains `memory_config` on `TMaze(length)` in chunks of 2,500 env steps, as the memory suite
does, and after each chunk prints one JSON line:

* `greedy`: the greedy policy's 20-episode mean (the suite's evaluation);
* `walk`: per cue, the greedy episode's end (`position` reached, `steps`, `return`) and
  its first actions (0 forward, 1 up, 2 down): a run whose greedy policy dawdles in the
  corridor ends at a position below `length` after `max_steps` steps;
* `junction_q`: per cue, the Q-values (return units) at the junction after a forced walk
  down the corridor (forward at every step, whatever the policy says), and `gap`: the
  correct turn's Q-value minus the wrong one's. A gap near 0 for both cues means the
  network has not learned to keep the cue, whatever the policy does.

Usage::

    python benchmarks/probe_tmaze.py --length 20 --seed 2 --budget 20000
    python benchmarks/probe_tmaze.py --length 20 --seed 1 --set train_interval=8

Runs in one thread (TensorFlow's intra/inter-op threads), as the suite's runs do.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from memory_suite import parse_overrides

CHUNK = 2_500
"""Env steps between two probes (the memory suite's evaluation interval)."""


def start_with_cue(env, cue: int) -> np.ndarray:
    """Resets `env` with its cue forced to `cue`; returns the first observation."""
    env.reset()
    env._cue = cue  # the probe picks the cue; the env has no public setter
    return env._observation()


def greedy_walk(agent, env, cue: int) -> dict:
    """One greedy episode of `env` with its cue forced to `cue`."""
    prediction = agent.predict(start_with_cue(env, cue))
    actions = []
    for _ in range(env.max_steps):
        obs, reward, terminated, truncated, _ = env.step(prediction.action)
        actions.append(prediction.action)
        if terminated or truncated:
            break
        prediction = agent.predict(obs, prediction.state)
    return {
        "cue": cue,
        "position": env._position,
        "steps": len(actions),
        "return": reward,
        "first_actions": "".join(map(str, actions[:12])),
    }


def junction_q(agent, env, cue: int) -> list[float]:
    """Q-values at `env`'s junction after its cue and a forced walk down the corridor."""
    prediction = agent.predict(start_with_cue(env, cue))
    for _ in range(env.length):
        obs, *_ = env.step(0)  # forward, whatever the policy says
        prediction = agent.predict(obs, prediction.state)
    return [round(float(q), 3) for q in prediction.q_values]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=20, help="corridor length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=20_000, help="env steps")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="FIELD=VALUE", help="memory_config overrides"
    )
    args = parser.parse_args()

    from r2d2_agent.compat import tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from r2d2_agent import R2D2Agent, presets
    from r2d2_agent.envs.memory import TMaze

    overrides = {"memory_span": args.length, **parse_overrides(args.set)}
    agent = R2D2Agent(presets.memory_config((4,), 3, seed=args.seed, **overrides))
    agent.compile()
    train_env, eval_env, walk_env = TMaze(args.length), TMaze(args.length), TMaze(args.length)
    eval_env.reset(seed=10_000 + args.seed)
    walk_env.reset(seed=0)
    steps = 0
    while steps < args.budget:
        agent.fit(train_env, nb_steps=CHUNK, verbose=0)
        steps += CHUNK
        history = agent.test(eval_env, nb_episodes=20, visualize=False, verbose=0)
        q = [junction_q(agent, walk_env, cue) for cue in (0, 1)]
        record = {
            "env_steps": steps,
            "greedy": round(float(np.mean(history.history["episode_reward"])), 3),
            "walk": [greedy_walk(agent, walk_env, cue) for cue in (0, 1)],
            "junction_q": q,
            "gap": [round(q[0][1] - q[0][2], 3), round(q[1][2] - q[1][1], 3)],
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
