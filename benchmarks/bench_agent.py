"""Learner and actor speed of the single-process components.

Measures:

* learner updates/s and sequences/s at the CartPole preset and at an Atari-sized
  configuration (84x84 grayscale x 4 stacked frames, DQN torso, LSTM 512, batch 64,
  burn-in 40 + 80 trained steps + n=5);
* actor env-steps/s on CartPole-v1 with the numpy policy and with the Keras
  (`tf.function`) policy, sequences going into the adder (no learning);
* one-step inference latency of each policy.

Prints one JSON object. Usage::

    python benchmarks/bench_agent.py                 # both sizes (Atari takes ~1-2 min)
    python benchmarks/bench_agent.py --skip-atari
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import R2D2Config
from r2d2_agent.compat import tf
from r2d2_agent.presets import cartpole_config
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_fill import atari_sized_config, fill_replay  # noqa: E402


def bench_learner(config: R2D2Config, updates: int, repeats: int, dtype: type) -> dict:
    learner = R2D2Builder(config, observation_dtype=dtype).make_learner()
    fill_replay(learner, config, max(config.batch_size * 2, config.warmup), dtype)
    start = time.perf_counter()
    learner.step()  # traces the graph
    trace_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(updates):
            learner.step()
        times.append((time.perf_counter() - start) / updates)
    per_update = statistics.median(times)
    return {
        "batch": config.batch_size,
        "burnin": config.burnin,
        "input_length": config.input_length,
        "multisteps": config.multisteps,
        "lstm_units": config.lstm_units,
        "first_update_s": round(trace_s, 2),
        "update_ms": round(per_update * 1e3, 3),
        "updates_per_s": round(1.0 / per_update, 2),
        "sequences_per_s": round(config.batch_size / per_update, 1),
    }


def bench_actor(config: R2D2Config, use_numpy: bool, steps: int) -> dict:
    sink_count = [0]

    def sink(record) -> None:
        sink_count[0] += 1

    builder = R2D2Builder(config, use_numpy_policy=use_numpy)
    policy = builder.make_policy()
    probe = builder.make_learner() if not use_numpy else None
    weights = probe.get_weights() if probe else _random_weights(config)
    policy.set_weights(weights)
    actor = builder.make_actor(policy, builder.make_adder(sink), epsilon=0.1, seed=0)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    actor.observe_first(obs)
    stacked = actor.stacked_observation()[None]
    state = np.zeros((1, 2, config.state_size), np.float32)
    lat = []
    for _ in range(200):
        start = time.perf_counter()
        policy.step(stacked, state)
        lat.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(steps):
        action = actor.select_action()
        obs, reward, terminated, truncated, _ = env.step(action)
        actor.observe(action, reward, obs, terminated, truncated)
        if terminated or truncated:
            obs, _ = env.reset()
            actor.observe_first(obs)
    elapsed = time.perf_counter() - start
    return {
        "policy": "numpy" if use_numpy else "keras_tf_function",
        "env_steps_per_s": round(steps / elapsed, 1),
        "inference_ms": round(statistics.median(lat) * 1e3, 4),
        "sequences_emitted": sink_count[0],
    }


def _random_weights(config: R2D2Config) -> list[np.ndarray]:
    from r2d2_agent.networks.numpy_net import weight_layout

    rng = np.random.default_rng(0)
    return [rng.normal(0, 0.1, shape).astype(np.float32) for _, shape in weight_layout(config)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100, help="updates per repeat (CartPole)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--actor-steps", type=int, default=20_000)
    parser.add_argument("--atari-updates", type=int, default=3)
    parser.add_argument("--skip-atari", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    cartpole = cartpole_config(seed=0)
    out = {
        "benchmark": "bench_agent",
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cpus",
        "tensorflow": tf.__version__,
        "learner_cartpole": bench_learner(cartpole, args.updates, args.repeats, np.float32),
        "actor_cartpole": [
            bench_actor(cartpole, True, args.actor_steps),
            bench_actor(cartpole, False, args.actor_steps // 4),
        ],
    }
    if not args.skip_atari:
        atari = atari_sized_config()
        out["learner_atari"] = bench_learner(atari, args.atari_updates, 1, np.uint8)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
