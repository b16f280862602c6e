"""How steady the greedy policy is when it plays a moving average of the online weights
(issue 24, `R2D2Config.policy_average_updates`), several horizons read off one run.

Averaging changes which weights are played, not what is learned, so one training run can
be read several ways: this trains the single-process agent once per seed (a preset with
`policy_average_updates=0`) and, every `--snap-every` env steps, folds the online weights into
exponential moving averages with the given per-snapshot rates (`--betas`: a rate b
averages over about `snap_every / (1 - b)` env steps). Every `--eval-every` env steps it
plays `--episodes` greedy episodes with the online weights and with each average, each
on an env of its own seeded alike (10,000 + seed), so the policies meet the same starts.
One JSON line per seed (the normalised curve of each policy, as `memory_suite.py`'s):

    python benchmarks/policy_average_sweep.py --task masked-cartpole --seeds 0 1 2 3
    python benchmarks/policy_average_sweep.py --task tmaze-20 --preset memory \\
        --set memory_span=20 --seeds 0 1

`--summary FILE...` prints, per policy, the median env steps to the first evaluation at
or above `--level` and the share of evaluations at that level from there on.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from memory_suite import PRESETS, make_task, parse_overrides, preset_config  # noqa: E402

ONLINE = "online"


def policy_names(betas: list[float]) -> list[str]:
    """The policies a run evaluates: the online weights, then one average per rate."""
    return [ONLINE] + [f"average{b:g}" for b in betas]


class Averages:
    """Exponential moving averages of the learner's online weights, one per rate, folded
    in every `every` env steps (an `R2D2Callback`, so `fit` calls it at each step)."""

    def __init__(self, agent: Any, betas: list[float], every: int) -> None:
        from r2d2_agent.callbacks import R2D2Callback  # noqa: PLC0415

        self._callback = type("_Fold", (R2D2Callback,), {"on_step_end": self._step})()
        self.agent, self.betas, self.every = agent, list(betas), int(every)
        self.steps = 0
        self.weights: dict[float, list[np.ndarray] | None] = {b: None for b in betas}

    @property
    def callback(self) -> Any:
        return self._callback

    def _step(self, step: int, logs: dict | None = None) -> None:
        self.steps += 1
        if self.steps % self.every or not self.agent.learner.updates:
            return
        online = self.agent.learner.get_weights()
        for b, average in self.weights.items():
            self.weights[b] = (
                [w.copy() for w in online]
                if average is None
                else [b * a + (1.0 - b) * w for a, w in zip(average, online, strict=True)]
            )


def play(agent: Any, env: Any, weights: list[np.ndarray] | None, episodes: int) -> float:
    """Mean return of `episodes` greedy episodes with `weights` (None: the online ones);
    the agent acts with the online weights again afterwards."""
    learner = agent.learner
    if weights is not None:  # without averaging `test` plays what `get_weights` gives
        learner.get_weights = lambda: weights
    try:
        history = agent.test(env, nb_episodes=episodes, visualize=False, verbose=0)
    finally:
        learner.__dict__.pop("get_weights", None)
        agent.sync_actor()
    return float(np.mean(history.history["episode_reward"]))


def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One training run of `seed`; the curves of every policy."""
    from r2d2_agent.compat import tf  # noqa: PLC0415

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from r2d2_agent import R2D2Agent  # noqa: PLC0415

    train_env, (low, high) = make_task(args.task)
    shape, actions = train_env.observation_space.shape, int(train_env.action_space.n)
    overrides = {"policy_average_updates": 0, **parse_overrides(args.set)}  # online weights
    config = preset_config(args.preset, shape, actions, seed, overrides)
    if config.policy_average_updates:
        raise SystemExit("train without policy_average_updates: the averages are made here")
    agent = R2D2Agent(config)
    agent.compile()
    averages = Averages(agent, args.betas, args.snap_every)
    names = policy_names(args.betas)
    envs = {name: make_task(args.task)[0] for name in names}
    for env in envs.values():
        env.reset(seed=10_000 + seed)
    curve: list[dict[str, Any]] = []
    steps, start = 0, time.perf_counter()
    while steps < args.budget:
        agent.fit(train_env, nb_steps=args.eval_every, verbose=0, callbacks=[averages.callback])
        steps += args.eval_every
        point: dict[str, Any] = {"env_steps": steps}
        for name, beta in zip(names, [None, *args.betas], strict=True):
            weights = None if beta is None else averages.weights[beta]
            if beta is not None and weights is None:
                point[name] = None  # no update yet
                continue
            mean = play(agent, envs[name], weights, args.episodes)
            point[name] = round(2.0 * (mean - low) / (high - low) - 1.0, 3)
        curve.append(point)
        print(json.dumps(point), file=sys.stderr, flush=True)
    return {
        "task": args.task,
        "seed": seed,
        "preset": args.preset,
        "set": args.set,
        "snap_every": args.snap_every,
        "betas": args.betas,
        "curve": curve,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def summarise(records: list[dict[str, Any]], level: float) -> str:
    """Per task and policy: median env steps to the first evaluation >= `level`, and the
    share of evaluations >= `level` from there on (over all seeds)."""
    lines = []
    for task in sorted({r["task"] for r in records}):
        runs = sorted((r for r in records if r["task"] == task), key=lambda r: r["seed"])
        lines.append(f"{task} (seeds {', '.join(str(r['seed']) for r in runs)})")
        for name in [k for k in runs[0]["curve"][0] if k != "env_steps"]:
            firsts, kept, total = [], 0, 0
            for r in runs:
                points = [(p["env_steps"], p[name]) for p in r["curve"]]
                first = next((s for s, v in points if v is not None and v >= level), None)
                after = [v for s, v in points if first is not None and s >= first]
                kept += sum(v >= level for v in after)
                total += len(after)
                firsts.append(first if first is not None else float("inf"))
            median = statistics.median(firsts)
            lines.append(
                f"  {name:12s} first >= {level:g} at a median of "
                f"{'never' if median == float('inf') else int(median)} env steps; "
                f"{kept} of {total} evaluations from there on "
                f"({100 * kept / max(total, 1):.0f}%)"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="masked-cartpole", help="a memory_suite.py task")
    parser.add_argument("--preset", choices=PRESETS, default="masked")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides FIELD=VALUE")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--eval-every", type=int, default=5_000, help="env steps")
    parser.add_argument("--episodes", type=int, default=20, help="per evaluation")
    parser.add_argument("--snap-every", type=int, default=100, help="env steps per fold")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.9, 0.95, 0.97])
    parser.add_argument("--summary", nargs="+", type=pathlib.Path, help="JSONL files")
    parser.add_argument("--level", type=float, default=0.9, help="the solved level")
    args = parser.parse_args()
    if args.summary:
        records = [json.loads(line) for path in args.summary for line in path.open()]
        print(summarise(records, args.level))
        return
    for seed in args.seeds:
        print(json.dumps(run(args, seed)), flush=True)


if __name__ == "__main__":
    main()
