"""A learner update on a batch cut to its real steps against the same update on whole
windows: CPU milliseconds per update on memory tasks (`r2d2_agent.replay.extent`).

For each task, `memory_config` with the task's memory span (the README's rule 1) fills a
replay from an actor acting at random (ε = 1) on the task's env, then times, on the same
sampled batches, `learner.learn` (which cuts each batch to its extent) against the update
traced for whole windows, called on the uncut batch. The two alternate in blocks of
`--updates` updates, each on its own learner with the same starting weights, 1 TensorFlow
thread; the figure is the median of `--repeats` blocks (process CPU time). With random
actions a T-maze's episodes run to their time limit (3 x (length + 1) steps), so its
windows are full: what a T-maze's batches look like before it is learned.

Prints one JSON object. Usage::

    python benchmarks/bench_extent.py
    python benchmarks/bench_extent.py --tasks cue-20x6 --repeats 9 --updates 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from r2d2_agent.compat import tf
from r2d2_agent.envs.memory import CueRecall, TMaze
from r2d2_agent.presets import memory_config
from r2d2_agent.replay.extent import batch_extent
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from header import report_header  # noqa: E402

TASKS = {
    # name: (env factory, memory_span as the README's table gives it)
    "cue-20x6": (lambda: CueRecall(delay=20, symbols=6), 21),
    "cue-25x5": (lambda: CueRecall(delay=25, symbols=5), 26),
    "cue-40x3": (lambda: CueRecall(delay=40, symbols=3), 41),
    "cue-60": (lambda: CueRecall(delay=60, symbols=4), 61),
    "tmaze-20": (lambda: TMaze(length=20), 20),
}


def filled_learners(task: str, sequences: int, seed: int = 0):
    """Two learners of the task's `memory_config` with equal weights, the first one's
    replay filled with `sequences` sequences of random play."""
    make_env, span = TASKS[task]
    env = make_env()
    config = memory_config(
        input_shape=env.observation_space.shape,
        nb_actions=int(env.action_space.n),
        memory_span=span,
        seed=seed,
    )
    builder = R2D2Builder(config)
    learner, whole = builder.make_learner(), builder.make_learner()
    whole.set_weights(learner.get_weights())
    policy = builder.make_policy()
    policy.set_weights(learner.get_weights())
    actor = builder.make_actor(policy, builder.make_adder(learner.add), 1.0, seed)
    episode = 0
    while learner.sequences_added < max(sequences, config.warmup):
        obs, _ = env.reset(seed=seed + episode)
        actor.observe_first(obs)
        done = False
        while not done:
            action = actor.select_action()
            obs, reward, terminated, truncated, _ = env.step(action)
            actor.observe(action, reward, obs, terminated, truncated)
            done = terminated or truncated
        episode += 1
    return config, learner, whole


def measure(task: str, updates: int, repeats: int) -> dict:
    """Median CPU ms per update, cut and whole, on the same batches."""
    config, learner, whole = filled_learners(task, sequences=200)
    batches = [learner.replay.sample(config.batch_size)[1] for _ in range(updates)]
    weights = np.ones(config.batch_size, np.float32)
    whole_update = whole._compiled_update()
    extents = {batch_extent(learner._layout, b["mask"], b["burnin_mask"]) for b in batches}

    def cut_block() -> None:
        for batch in batches:
            learner.learn(batch, weights)

    def whole_block() -> None:
        for batch in batches:
            arrays = [batch[name] for name in whole._fields]
            whole_update(*arrays, weights, whole._take_new_rewards())

    cut_block()  # traces
    whole_block()
    times: dict[str, list[float]] = {"cut": [], "whole": []}
    for _ in range(repeats):
        for name, block in (("cut", cut_block), ("whole", whole_block)):
            start = time.process_time()
            block()
            times[name].append((time.process_time() - start) / updates * 1e3)
    cut, full = statistics.median(times["cut"]), statistics.median(times["whole"])
    return {
        "window": [config.burnin, config.input_length, config.multisteps],
        "extents_burnin_length": sorted([e.burnin, e.input_length] for e in extents),
        "cpu_ms_cut": round(cut, 2),
        "cpu_ms_whole": round(full, 2),
        "cut_over_whole": round(cut / full, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    """Measures each task and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--updates", type=int, default=20, help="updates per block")
    parser.add_argument("--repeats", type=int, default=7, help="blocks of each kind")
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    report = {**report_header("bench_extent"), "tasks": {}}
    for task in args.tasks:
        report["tasks"][task] = measure(task, args.updates, args.repeats)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
