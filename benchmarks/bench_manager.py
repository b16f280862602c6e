"""Benchmark: `R2D2Manager` throughput, weight transfer latency, time to solve CartPole.

Sections (one JSON object is printed at the end):

* ``throughput``: for 1 and 2 actors, acting with the numpy policy (no TensorFlow in the
  actors) or the Keras policy, with the learner free-running (``rate_limit=False``) on the
  CartPole preset network: env steps/s per actor and in total, learner updates/s,
  measured over the steady part of a ``--seconds`` run (from the first learner update to
  the end). One more run shows the default rate-limited mode (2 numpy actors).
* ``weights``: what one weight transfer costs on the preset network: the learner's publish
  (``get_weights`` + ``SharedWeights.publish``) and an actor's pull
  (``pull_if_newer`` + ``policy.set_weights``) for the numpy and the Keras policy; plus
  ``bench_weights.bench_set`` on the same shapes (shared memory vs a pickled mp.Queue).
* ``overlap``: acting beside learning at the same ratio (the CartPole preset's 4 env steps
  per update, or each of ``--train-intervals``): env steps/s of the manager with 1 actor
  and the default rate limit over the steady part of a ``--seconds`` run, against the
  single-process agent's `fit` over the same number of env steps after its warm-up; the
  ratio, and where each process spent its time (`TrainResult.learner_info` /
  `actor_info` "seconds").
* ``solve``: env steps and wall seconds to solve CartPole-v1 with the protocol of
  tests/test_learning.py (10 greedy episodes every 2,500 env steps, solved at the first
  mean >= 475), for each seed of ``--seeds`` (and each of ``--train-intervals``): the
  manager (``--solve-actors``, default 2; evaluations run in the parent while the
  children keep going) on each of ``--solve-backends`` (default multiprocessing; Ray
  with `RayOptions` fields: ``ray:send_interval=0.2``), then the single-process
  `R2D2Agent` (not with ``--no-agent``). Each run's line also goes to
  stderr as it ends. Each run has a fresh Python process of its own, as a user's script
  would, and ``total_s`` counts from its launch: the interpreter's start and every
  import (TensorFlow in the agent's process or the manager's learner) count for both.
  ``startup_s`` is the part of it before the first learner update.

Usage::

    python benchmarks/bench_manager.py [--seconds 20] [--sections throughput weights solve]
    python benchmarks/bench_manager.py --sections overlap --train-intervals 4 8 16 32
    python benchmarks/bench_manager.py --sections solve --seeds 0 1 2 3 4 --solve-actors 1
    python benchmarks/bench_manager.py --sections solve --no-agent \
        --solve-backends multiprocessing ray "ray:send_interval=0.2"
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

from r2d2_agent.distributed import R2D2Manager
from r2d2_agent.presets import cartpole_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_process import in_fresh_process  # noqa: E402
from header import report_header  # noqa: E402
from overrides import parse_override_list  # noqa: E402

CARTPOLE = functools.partial(gym.make, "CartPole-v1")


def run_throughput(
    actors: int,
    numpy_policy: bool,
    seconds: float,
    rate_limit: bool,
    train_interval: int | None = None,
    **manager_kwargs,
) -> dict:
    """One free-running (or rate-limited) run; rates over its steady part.

    `train_interval` overrides the preset's env steps per update (the rate limit's ratio);
    `manager_kwargs` go to `R2D2Manager` (e.g. `backend="ray"`).
    """
    config = _config(0, train_interval)
    manager = R2D2Manager(
        CARTPOLE,
        config,
        actor_num=actors,
        progress=False,
        use_numpy_policy=numpy_policy,
        rate_limit=rate_limit,
        **manager_kwargs,
    )
    marks: dict = {}
    cpu: dict = {}

    def on_progress(p):
        if "start" not in marks and p.learner_updates >= 1 and min(p.actor_env_steps) > 0:
            marks["start"] = p
            cpu["start"] = _cpu_seconds(p)
        marks["end"] = p
        if "start" in marks:
            cpu["end"] = _cpu_seconds(p)

    result = manager.train(max_seconds=seconds, on_progress=on_progress)
    if "start" not in marks:
        raise RuntimeError(
            f"no learner update within the {seconds} s run ({result}); give it more --seconds"
        )
    a, b = marks["start"], marks["end"]
    dt = b.elapsed_seconds - a.elapsed_seconds
    per_actor = [(y - x) / dt for x, y in zip(a.actor_env_steps, b.actor_env_steps, strict=True)]
    actor_cpu = [
        cpu["end"].get(pid, np.nan) - cpu["start"].get(pid, np.nan)
        for pid in a.actor_pids
        if pid is not None
    ]
    steps = b.env_steps - a.env_steps
    learner_cpu = cpu["end"].get(a.learner_pid, np.nan) - cpu["start"].get(a.learner_pid, np.nan)
    return {
        "actors": actors,
        "train_interval": config.train_interval,
        "policy": "numpy" if numpy_policy else "keras",
        "rate_limit": rate_limit,
        "measured_s": round(dt, 1),
        "startup_s": round(a.elapsed_seconds, 1),
        "env_steps_per_s_each": [round(r, 1) for r in per_actor],
        "env_steps_per_s_total": round(sum(per_actor), 1),
        "learner_updates_per_s": round((b.learner_updates - a.learner_updates) / dt, 1),
        "sequences_per_s": round((b.sequences_received - a.sequences_received) / dt, 1),
        "weights_publishes_per_s": round((b.weights_version - a.weights_version) / dt, 1),
        "env_steps_per_update": round(result.env_steps / max(result.learner_updates, 1), 1),
        "actor_tensorflow_loaded": [i.get("tensorflow_loaded") for i in result.actor_info],
        "learner_seconds": result.learner_info.get("seconds"),
        "actor_seconds": [i.get("seconds") for i in result.actor_info],
        # CPU time of the actor processes per 1,000 env steps and of the learner process
        # per update, over the same steady part (Linux /proc; NaN elsewhere): what a step
        # costs whatever the load.
        "actor_cpu_ms_per_1k_steps": round(sum(actor_cpu) / max(steps, 1) * 1e6, 1),
        "learner_cpu_ms_per_update": round(
            learner_cpu / max(b.learner_updates - a.learner_updates, 1) * 1e3, 2
        ),
    }


def _cpu_seconds(progress) -> dict:
    """User + system CPU seconds of the run's actor and learner processes, by pid."""
    out = {}
    for pid in (*progress.actor_pids, progress.learner_pid):
        if pid is None:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _config(seed: int, train_interval: int | None):
    """The CartPole preset, with another ratio of env steps per update if given."""
    overrides = {} if train_interval is None else {"train_interval": train_interval}
    return cartpole_config(seed=seed, **overrides)


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 4)


def run_weights(repeats: int) -> dict:
    """Publish and pull latencies on the CartPole preset network (imports TensorFlow)."""
    import bench_weights

    from r2d2_agent.distributed.mp.shared_weights import WeightsSpec
    from r2d2_agent.distributed.mp.weights_channel import (
        SharedWeightsPublisher,
        SharedWeightsSubscriber,
    )
    from r2d2_agent.networks import KerasPolicy, NumpyNetwork
    from r2d2_agent.roles import R2D2Builder

    config = cartpole_config(seed=0)
    learner = R2D2Builder(config).make_learner()
    weights = learner.get_weights()
    spec = WeightsSpec.from_arrays(weights)
    out: dict = {"n_arrays": len(weights), "nbytes": spec.nbytes}
    publisher = SharedWeightsPublisher(spec, name_prefix="r2d2bm")
    try:
        out["learner_get_weights_ms"] = _median_ms(learner.get_weights, repeats)
        out["learner_publish_ms"] = _median_ms(
            lambda: publisher.publish(learner.get_weights()), repeats
        )
        numpy_policy, keras_policy = NumpyNetwork(config), KerasPolicy(config)
        for name, policy in (("numpy", numpy_policy), ("keras", keras_policy)):
            subscriber = SharedWeightsSubscriber(publisher.handle)

            def pull(subscriber=subscriber, policy=policy):
                publisher.publish(weights)  # so that there is always a newer version
                t0 = time.perf_counter()
                policy.set_weights(subscriber.pull_if_newer())
                return time.perf_counter() - t0

            pull()
            out[f"actor_pull_{name}_ms"] = round(
                statistics.median(pull() for _ in range(repeats)) * 1e3, 4
            )
            subscriber.close()
        obs, state = np.zeros((1, 1, 4), np.float32), np.zeros((1, 2, 64), np.float32)
        out["numpy_policy_step_ms"] = _median_ms(lambda: numpy_policy.step(obs, state), repeats)
        keras_policy.step(obs, state)
        out["keras_policy_step_ms"] = _median_ms(lambda: keras_policy.step(obs, state), repeats)
    finally:
        publisher.close()
    with bench_weights.echo_child() as (inq, outq):
        shapes = [tuple(w.shape) for w in weights]
        out["bench_weights_set"] = bench_weights.bench_set(shapes, repeats, inq, outq)
    return out


def run_solve_manager(
    seed: int,
    budget: int,
    actors: int,
    train_interval: int | None = None,
    launched_at: float | None = None,
    backend: str = "multiprocessing",
) -> dict:
    """Time to solve with the manager; evaluations in the parent, numpy policy.

    `total_s` counts from `launched_at` (a `time.time()`; default: the manager's
    construction), the children's start and TensorFlow import included; `startup_s` is
    the time from there to the first learner update. `backend` is a `--solve-backends`
    item (`solve_backend`).
    """
    start = time.time() if launched_at is None else launched_at
    config = _config(seed, train_interval)
    manager = R2D2Manager(
        CARTPOLE, config, actor_num=actors, progress=False, **solve_backend(backend)
    )
    eval_env, evals, solved, next_eval = gym.make("CartPole-v1"), [], {}, [2_500]
    startup: list[float] = []

    def on_progress(p):
        if not startup and p.learner_updates >= 1:
            startup.append(time.time() - start)
        if p.env_steps >= next_eval[0]:
            next_eval[0] += 2_500
            mean = float(np.mean(manager.evaluate(10, env=eval_env, seed=None if evals else 1_000)))
            evals.append((p.env_steps, round(mean, 1)))
            if mean >= 475 and not solved:
                solved.update(
                    env_steps=p.env_steps,
                    updates=p.learner_updates,
                    wall_s=round(p.elapsed_seconds, 1),
                    total_s=round(time.time() - start, 1),
                )
                manager.request_stop()

    result = manager.train(nb_steps=budget, max_seconds=900, on_progress=on_progress)
    return {
        "mode": f"manager({actors})",
        "backend": backend,
        "seed": seed,
        "train_interval": config.train_interval,
        "solved": bool(solved),
        "env_steps": solved.get("env_steps", result.env_steps),
        "learner_updates": solved.get("updates", result.learner_updates),
        "wall_s": solved.get("wall_s", round(result.elapsed_seconds, 1)),
        "total_s": solved.get("total_s", round(time.time() - start, 1)),
        "startup_s": round(startup[0], 1) if startup else None,
        "evals": evals,
    }


def solve_backend(spec: str) -> dict:
    """`R2D2Manager`'s keyword arguments for a `--solve-backends` item: "multiprocessing",
    "ray", or "ray:FIELD=VALUE,..." (`RayOptions` fields, e.g. "ray:send_interval=0.2")."""
    name, _, fields = spec.partition(":")
    if name == "multiprocessing" and not fields:
        return {}
    if name != "ray":
        raise SystemExit(
            f"a solve backend is multiprocessing or ray[:FIELD=VALUE,...], got {spec!r}"
        )
    from r2d2_agent.distributed.ray_backend import RayOptions

    return {"backend": "ray", "ray_options": RayOptions(**parse_override_list(fields))}


def run_solve_agent(
    seed: int, budget: int, train_interval: int | None = None, launched_at: float | None = None
) -> dict:
    """Time to solve with the single-process agent (tests/test_learning.py protocol).

    `wall_s` counts from the first env step, `total_s` from `launched_at` (a
    `time.time()`; default: the agent's construction). `startup_s` runs from there to
    the end of `compile` (TensorFlow's import included when it happens here); the first
    update's tracing falls in `wall_s`.
    """
    start = time.time() if launched_at is None else launched_at
    from r2d2_agent import R2D2Agent
    from r2d2_agent.testing import train_until_solved

    config = _config(seed, train_interval)
    agent = R2D2Agent(config)
    agent.compile()
    startup = time.time() - start
    result = train_until_solved(agent, CARTPOLE, budget)
    return {
        "mode": "agent",
        "seed": seed,
        "train_interval": config.train_interval,
        "solved": result["solved_at"] is not None,
        "env_steps": result["solved_at"] or result["env_steps"],
        "learner_updates": int(agent.learner.updates),
        "wall_s": round(result["solved_wall_s"] or result["wall_s"], 1),
        "total_s": round(startup + (result["solved_wall_s"] or result["wall_s"]), 1),
        "startup_s": round(startup, 1),
        "evals": [(s, round(m, 1)) for s, m in result["evals"]],
    }


def run_agent_speed(steps: int, train_interval: int | None = None) -> dict:
    """The single-process agent's env steps/s at the CartPole preset, after warm-up."""
    from r2d2_agent import R2D2Agent

    config = _config(0, train_interval)
    agent = R2D2Agent(config)
    agent.compile()
    env = CARTPOLE()
    agent.fit(env, nb_steps=config.warmup * 2, verbose=0)  # replay ready, graph traced
    updates = agent.learner.updates
    start = time.perf_counter()
    agent.fit(env, nb_steps=steps, verbose=0)
    seconds = time.perf_counter() - start
    env.close()
    return {
        "mode": "agent",
        "env_steps": steps,
        "seconds": round(seconds, 2),
        "env_steps_per_s": round(steps / seconds, 1),
        "env_steps_per_update": round(steps / max(agent.learner.updates - updates, 1), 2),
    }


def run_overlap(seconds: float, train_interval: int | None = None) -> dict:
    """Manager (1 actor, rate-limited at the agent's ratio) vs the agent, same preset."""
    manager = run_throughput(1, True, seconds, True, train_interval)
    steps = int(manager["env_steps_per_s_total"] * manager["measured_s"])
    agent = run_agent_speed(max(steps, 2_000), train_interval)
    return {
        "train_interval": manager["train_interval"],
        "manager": manager,
        "agent": agent,
        "speedup": round(manager["env_steps_per_s_total"] / agent["env_steps_per_s"], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    """Runs the selected sections and prints one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per throughput run")
    parser.add_argument("--repeats", type=int, default=50, help="per latency measure")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="of the solve runs")
    parser.add_argument("--budget", type=int, default=40_000, help="env steps per solve run")
    parser.add_argument(
        "--solve-actors", type=int, default=2, help="actor processes of the manager's solve runs"
    )
    parser.add_argument(
        "--solve-backends",
        nargs="+",
        default=["multiprocessing"],
        help='the manager\'s solve runs: "multiprocessing", "ray" or "ray:FIELD=VALUE,..." '
        "(RayOptions fields), one run of each per seed, in turn",
    )
    parser.add_argument(
        "--no-agent",
        action="store_true",
        help="solve section: the manager only (no single-process agent run)",
    )
    parser.add_argument(
        "--train-intervals",
        type=int,
        nargs="+",
        default=None,
        help="env steps per update of the overlap and solve sections (default: the preset's)",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=["throughput", "weights", "solve"],
        choices=["throughput", "weights", "solve", "overlap"],
    )
    args = parser.parse_args(argv)
    report: dict = report_header("bench_manager")
    t0 = time.perf_counter()
    if "throughput" in args.sections:  # first: the parent has not imported TensorFlow yet
        report["throughput"] = [
            run_throughput(n, numpy_policy, args.seconds, False)
            for n in (1, 2)
            for numpy_policy in (True, False)
        ]
        report["throughput"].append(run_throughput(2, True, args.seconds, True))
    intervals = args.train_intervals or [None]
    if "overlap" in args.sections:
        report["overlap"] = [run_overlap(args.seconds, interval) for interval in intervals]
    if "solve" in args.sections:
        report["solve"] = []
        for spec in args.solve_backends:
            solve_backend(spec)  # a bad item stops the benchmark before any run
        for interval, seed in ((i, s) for i in intervals for s in args.seeds):
            runs = [
                (run_solve_manager, (seed, args.budget, args.solve_actors, interval), spec)
                for spec in args.solve_backends
            ]
            if not args.no_agent:
                runs.append((run_solve_agent, (seed, args.budget, interval), None))
            for fn, fn_args, spec in runs:
                kwargs = {"backend": spec} if spec else {}
                run = in_fresh_process(fn, *fn_args, launched_at=time.time(), **kwargs)
                print(json.dumps(run), file=sys.stderr, flush=True)  # progress on long runs
                report["solve"].append(run)
    if "weights" in args.sections:
        report["weights"] = run_weights(args.repeats)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
