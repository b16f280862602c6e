"""Benchmark: the Ray backend beside multiprocessing, and what crosses the network.

Sections (one JSON object is printed at the end):

* ``throughput``: for 1, 2 and 4 actors (numpy policy, CartPole preset network, learner
  free-running: ``rate_limit=False``), env steps/s in total and learner updates/s over the
  steady part of a ``--seconds`` run, with ``backend="multiprocessing"`` and
  ``backend="ray"`` (a local Ray started once for all its runs, as on a one-node
  cluster, and given ``--ray-settle`` seconds to start its idle workers), alternating in
  this process (multiprocessing then Ray for each actor count), ``--rounds`` times over;
  ``ray_over_multiprocessing`` gives each round's ratio of env steps/s and the median.
* ``weights``: one weights publish (``ray.put`` of the arrays + registering the reference
  with the run's board) and one fetch by another process (asking the board for the
  reference, as an actor's report does, + ``ray.get`` by reference + a writable copy),
  on the CartPole preset network and on the CPU-sized
  Atari network of ``examples/atari.py``, with their sizes in bytes.
* ``experience``: bytes an actor sends per env step and per sequence on the CartPole
  preset (pickled `Experience` batches of a real actor), and per learner update at the
  default ratio.
* ``calls``: round trips from one Ray actor: a report to the run's board, and one
  ``put_experience`` of a ``send_batch_size`` batch of those real sequences into a learner's
  inbox (drained by a thread, as the learner's loop does), in ms per call.

Usage::

    python benchmarks/bench_ray.py [--seconds 30] [--actors 1 2 4] [--rounds 3] [--sections ...]
        [--report-interval 0.5]   # RayOptions.report_interval of the Ray runs
        [--ray-variants "" "send_interval=0.2" "send_interval=0.2,report_interval=0.5"]
                                  # several RayOptions settings, each a Ray run per round
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_manager  # noqa: E402  (a sibling script)
from overrides import parse_override_list  # noqa: E402


def run_throughput(
    actor_counts: list[int],
    seconds: float,
    backends: list[str],
    ray_settle: float = 10.0,
    rounds: int = 1,
    report_interval: float | None = None,
    ray_variants: list[str] | None = None,
) -> list[dict]:
    """Free-running runs per backend and actor count (Ray started once, then reused).

    Ray starts one idle Python worker per CPU it is given; their start-up (a few CPU
    seconds each) would fall into the first Ray run's measured part, so the runs begin
    `ray_settle` seconds after `ray.init`. With both backends the runs alternate
    (multiprocessing, then Ray, for each actor count in turn), `rounds` times over, so
    a machine whose speed drifts shares the drift out between the two; each round starts
    one run later in that order than the round before (round 1: Ray first), so that no
    run always comes right after the same other run (on a loaded box, of two Ray
    variants the one run second scored lower in 3 rounds of 4, in either order).
    `report_interval` is the Ray runs' `RayOptions.report_interval` (None: its default).
    `ray_variants` (each "field=value,..." of `RayOptions`, "" for its defaults) runs Ray
    once per variant in each round, labelled "ray[variant]" (None: one Ray run).
    """
    import ray

    from r2d2_agent.distributed.ray_backend import RayOptions

    uses_ray = "ray" in backends
    if uses_ray:
        os.environ.setdefault("RAY_worker_niceness", "0")  # as a Ray the manager starts
        ray.init(num_cpus=max(os.cpu_count() or 1, 1 + max(actor_counts)), include_dashboard=False)
        time.sleep(ray_settle)
    rows = []
    try:
        # (label, keyword arguments of the run): multiprocessing, then each Ray variant
        runs: list[tuple[str, dict]] = []
        for backend in backends:
            if backend != "ray":
                runs.append((backend, {}))
                continue
            for label, fields in _ray_runs(report_interval, ray_variants):
                runs.append((label, {"backend": "ray", "ray_options": RayOptions(**fields)}))
        for round_index in range(rounds):
            shift = round_index % len(runs)
            for actors in actor_counts:
                for label, kwargs in runs[shift:] + runs[:shift]:
                    row = bench_manager.run_throughput(
                        actors, True, seconds, rate_limit=False, **kwargs
                    )
                    rows.append({"backend": label, "round": round_index, **row})
    finally:
        if uses_ray:
            ray.shutdown()
    return rows


def _ray_runs(
    report_interval: float | None, ray_variants: list[str] | None
) -> list[tuple[str, dict]]:
    """(label, `RayOptions` fields) of each Ray run in a round."""
    if ray_variants is None:
        fields = {} if report_interval is None else {"report_interval": report_interval}
        return [("ray", fields)]
    return [(f"ray[{variant}]", parse_override_list(variant)) for variant in ray_variants]


def ray_ratios(rows: list[dict]) -> dict[str, dict]:
    """Ray's env steps/s over multiprocessing's, per actor count (and per Ray variant,
    keyed "actors ray[variant]", when there are several): each round's and their
    median."""
    rates = {(r["backend"], r["actors"], r["round"]): r["env_steps_per_s_total"] for r in rows}
    ratios: dict[str, dict] = {}
    for backend, actors, round_index in sorted(rates):
        mp_rate = rates.get(("multiprocessing", actors, round_index))
        if not backend.startswith("ray") or not mp_rate:
            continue
        key = str(actors) if backend == "ray" else f"{actors} {backend}"
        ratio = round(rates[(backend, actors, round_index)] / mp_rate, 3)
        ratios.setdefault(key, {"per_round": []})["per_round"].append(ratio)
    for entry in ratios.values():
        entry["median"] = round(statistics.median(entry["per_round"]), 3)
    return ratios


class _Fetcher:
    """A Ray actor that fetches published weights as an actor process does."""

    def __init__(self, board) -> None:
        import ray

        from r2d2_agent.distributed.ray_backend.channels import ObjectStoreSubscriber

        self.subscriber = ObjectStoreSubscriber(lambda: ray.get(board.weights_if_newer.remote(0)))

    def fetch(self) -> float:
        """Seconds for one `pull_if_newer` that finds a newer version."""
        start = time.perf_counter()
        arrays = self.subscriber.pull_if_newer()
        elapsed = time.perf_counter() - start
        if arrays is None:
            raise RuntimeError("no newer weights to fetch")
        return elapsed


def _weights_of(config, image_model=None) -> list[np.ndarray]:
    from r2d2_agent.roles import R2D2Builder

    return R2D2Builder(config, image_model).make_learner().get_weights()


def run_weights(repeats: int) -> list[dict]:
    """Publish and fetch costs through the object store, for two network sizes."""
    import ray

    from r2d2_agent.distributed.ray_backend.board import RunBoard
    from r2d2_agent.distributed.ray_backend.channels import ObjectStorePublisher
    from r2d2_agent.presets import cartpole_config

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import atari  # the example's CPU-sized configuration

    from r2d2_agent import InputType, R2D2Config
    from r2d2_agent.image_models import DQNImageModel

    atari_config = R2D2Config(
        input_shape=(84, 84),
        nb_actions=4,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        seed=0,
        **atari.CPU_SIZED,
    )
    networks = {
        "cartpole_preset": _weights_of(cartpole_config(seed=0)),
        "atari_cpu_sized": _weights_of(atari_config, DQNImageModel()),
    }
    ray.init(num_cpus=2, include_dashboard=False)
    rows = []
    try:
        board = ray.remote(num_cpus=0)(RunBoard).remote((0,), (0,))
        fetcher = ray.remote(num_cpus=0)(_Fetcher).remote(board)
        publisher = ObjectStorePublisher(board)
        for name, weights in networks.items():
            publish_s, fetch_s = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                publisher.publish(weights)
                publish_s.append(time.perf_counter() - start)
                fetch_s.append(ray.get(fetcher.fetch.remote()))
            rows.append(
                {
                    "network": name,
                    "bytes": int(sum(w.nbytes for w in weights)),
                    "arrays": len(weights),
                    "publish_ms": round(statistics.median(publish_s) * 1e3, 3),
                    "fetch_ms": round(statistics.median(fetch_s) * 1e3, 3),
                }
            )
    finally:
        ray.shutdown()
    return rows


class _Collector:
    """An `ExperienceSender` that keeps the batches (and never refuses)."""

    def __init__(self) -> None:
        self.batches: list = []

    def send(self, items, timeout=None) -> bool:
        self.batches.append(items)
        return True

    def close(self) -> None:
        pass


class _FixedWeights:
    """A `WeightsSubscriber` that hands out one set of weights once."""

    def __init__(self, weights) -> None:
        self._weights = weights
        self.version = 0

    def pull_if_newer(self):
        if self.version:
            return None
        self.version = 1
        return self._weights

    def close(self) -> None:
        pass


class _InboxHost:
    """A learner stand-in: a threaded Ray actor whose inbox a thread drains."""

    def __init__(self) -> None:
        import threading

        from r2d2_agent.distributed.ray_backend.channels import Inbox

        self.inbox = Inbox(64 * 4)  # the default inbox_size batches of 4 sequences
        self.taken = 0
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            batch = self.inbox.get(0.1)
            if batch is not None:
                self.taken += len(batch)

    def put_experience(self, payload: bytes) -> bool:
        return self.inbox.put(pickle.loads(payload))


class _Caller:
    """Times round trips from a Ray actor, as an actor process makes them."""

    def __init__(self, board, host, batch) -> None:
        self.board, self.host = board, host
        self.batch = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)  # as an actor sends

    def time_calls(self, repeats: int) -> dict:
        import ray

        from r2d2_agent.distributed.ray_backend.board import ActorReport

        def per_call(fn) -> float:
            fn()  # warm
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            return (time.perf_counter() - start) / repeats * 1e3

        report = ActorReport(0, 1, 0)
        return {
            "board_report_ms": round(
                per_call(lambda: ray.get(self.board.actor_report.remote(report))), 3
            ),
            "put_experience_ms": round(
                per_call(lambda: ray.get(self.host.put_experience.remote(self.batch))), 3
            ),
        }


def run_calls(steps: int, repeats: int) -> dict:
    """Round trips to the board and into a learner's inbox (real CartPole sequences)."""
    import ray

    from r2d2_agent.distributed.ray_backend.board import RunBoard

    batches = _actor_batches(steps)[0]
    batch = next(b for b in batches if len(b) == 4)
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        board = ray.remote(num_cpus=0)(RunBoard).remote((0,), (0,))
        host = ray.remote(num_cpus=0, max_concurrency=4)(_InboxHost).remote()
        caller = ray.remote(num_cpus=0)(_Caller).remote(board, host, batch)
        out = ray.get(caller.time_calls.remote(repeats))
    finally:
        ray.shutdown()
    return {"batch_sequences": len(batch), **out}


def _actor_batches(steps: int) -> tuple[list, int, object]:
    """The batches a real CartPole-preset actor sends in `steps` env steps."""
    import gymnasium as gym

    from r2d2_agent.distributed.actor_runner import ActorRunner
    from r2d2_agent.presets import cartpole_config
    from r2d2_agent.roles import R2D2Builder

    config = cartpole_config(seed=0)
    builder = R2D2Builder(config)
    sender = _Collector()
    env = gym.make("CartPole-v1")
    runner = ActorRunner(
        0, builder, env, sender, _FixedWeights(_weights_of(config)), epsilon=0.4, seed=0
    )
    runner.run(lambda: runner.steps >= steps)
    env.close()
    return sender.batches, runner.steps, config


def run_experience(steps: int) -> dict:
    """Pickled bytes an actor sends on the CartPole preset (a real actor, no learner)."""
    batches, env_steps, config = _actor_batches(steps)
    sizes = [len(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)) for batch in batches]
    sequences = sum(len(batch) for batch in batches)
    total = sum(sizes)
    return {
        "env_steps": env_steps,
        "sequences": sequences,
        "batches": len(sizes),
        "bytes_per_env_step": round(total / env_steps, 1),
        "bytes_per_sequence": round(total / sequences, 1),
        "env_steps_per_update": config.train_interval,
        "bytes_per_update": round(total / env_steps * config.train_interval, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per throughput run")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--rounds", type=int, default=1, help="throughput runs per backend and actor count"
    )
    parser.add_argument("--repeats", type=int, default=30, help="per weights measure")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["multiprocessing", "ray"],
        choices=["multiprocessing", "ray"],
    )
    parser.add_argument("--experience-steps", type=int, default=5000)
    parser.add_argument(
        "--ray-settle",
        type=float,
        default=10.0,
        help="seconds between ray.init and the first Ray throughput run (Ray's idle workers start)",
    )
    parser.add_argument(
        "--report-interval",
        type=float,
        default=None,
        help="RayOptions.report_interval of the Ray runs (default: RayOptions' own)",
    )
    parser.add_argument(
        "--ray-variants",
        nargs="+",
        default=None,
        help='RayOptions settings, each "field=value,..." ("" for the defaults): one Ray run '
        "per variant in each round, each compared with that round's multiprocessing run",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=["throughput", "weights", "experience", "calls"],
        choices=["throughput", "weights", "experience", "calls"],
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.ray_variants is not None and args.report_interval is not None:
        parser.error("give --report-interval inside --ray-variants when using them")
    for variant in args.ray_variants or []:
        try:
            from r2d2_agent.distributed.ray_backend import RayOptions

            RayOptions(**parse_override_list(variant))
        except (ValueError, SyntaxError, TypeError, SystemExit) as error:
            parser.error(f"--ray-variants {variant!r}: {error}")
    out: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": vars(args),
    }
    if "experience" in args.sections:
        out["experience"] = run_experience(args.experience_steps)
    if "calls" in args.sections:
        out["calls"] = run_calls(args.experience_steps, args.repeats * 10)
    if "weights" in args.sections:
        out["weights"] = run_weights(args.repeats)
    if "throughput" in args.sections:
        out["throughput"] = run_throughput(
            args.actors,
            args.seconds,
            args.backends,
            args.ray_settle,
            args.rounds,
            args.report_interval,
            args.ray_variants,
        )
        out["ray_over_multiprocessing"] = ray_ratios(out["throughput"])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
