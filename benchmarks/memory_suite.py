"""The memory suite: our R2D2 and sb3-contrib's RecurrentPPO side by side on memory tasks
(and SB3 DQN on the control tasks).

Tasks (`r2d2_agent.envs.memory`, plus CartPole and Acrobot): tmaze-5/20/35/50
(`TMaze(length)`), cue-10/30/45/60 (`CueRecall(delay, 4 symbols)`), repeat-3/4/8
(`RepeatPrevious(k, 4 symbols, 50 steps)`), repeat-6x8 (`RepeatPrevious(6, 8 symbols, 40
steps)`: a check of a rule on a task it was not built on; tmaze-12, cue-20x6 and
repeat-2x6 likewise, stop 46; tmaze-16, stop 50; tmaze-24 and cue-25x5, stop 51;
tmaze-28 and cue-40x3, stop 55), masked-cartpole,
noisy-masked-cartpole (noise std 0.05), cartpole, acrobot (`Acrobot-v1`, fully observed:
the control races' check that a preset change does not hurt a control task it was not
tuned on). Returns are normalised to [-1, 1] through each task's `score_range`
(CartPole's: 0-500; Acrobot's: -500-0). A run counts as solved at `--threshold`, by
default 0.9 (CartPole's 475), on Acrobot 0.6 (Gymnasium's `reward_threshold`, -100).

Protocol, the same for both agents: 1 thread each (TensorFlow's intra/inter-op threads,
`torch.set_num_threads(1)`); train to `--budget` env steps (every training env step
counts); every `--eval-every` env steps a greedy evaluation of 20 episodes on a separate
env (seeded 10,000 + seed) is recorded (the curve). Reported per run: `best` and `final`
normalised greedy means, `solved_at` (env steps of the first evaluation at or above
`--threshold`, normalised), `stays_solved` (every later evaluation at or above it too),
`wall_s` (training and evaluations) and `train_wall_s` (training alone), and the train
seconds at each evaluation; the table's last column is the train seconds a run took to
first match the peer's best on the same seed (at equal results, who got there in
less time). `--reward-scale`
multiplies the training env's rewards (evaluations are reported unscaled), for the
scale-invariance check.

Agents:

* `ours`: the single-process `R2D2Agent` (one actor and the learner in one thread: the
  CPU-fair counterpart of RecurrentPPO's single process), `--preset masked` (the
  masked-CartPole preset, `presets.masked_cartpole_config`), `--preset memory`
  (`presets.memory_config`) or `--preset cartpole` (`presets.cartpole_config`), with the
  task's input shape and action count and
  `--set FIELD=VALUE` overrides (Python literals; with `--preset memory`,
  `--set memory_span=N` gives the task's memory span, as a user would).
* `rppo`: RecurrentPPO with the rl-zoo masked-CartPole settings of
  `shared/peers/sb3_rppo.py`, applied untuned (8 envs, VecNormalize, n_steps 32, batch 256,
  γ 0.98, λ 0.8, 20 epochs, lr and clip linear from 1e-3 and 0.2 over the budget, LSTM 64).
* `dqn`: stable-baselines3's DQN with rl-zoo's tuned settings for the task (`DQN_ZOO`:
  acrobot and cartpole only; its ε schedule kept in env steps whatever the budget).

The peers run in the peers' venv (`--peers-python`, default `$PEERS_PYTHON` or
`~/.peers-venv/bin/python`) as a subprocess that loads `r2d2_agent/envs/memory.py` by
file path and imports nothing else of this package.

Usage::

    # one run: prints one JSON line
    python benchmarks/memory_suite.py one --agent ours --preset masked --task cue-10 --seed 0
    python benchmarks/memory_suite.py one --agent rppo --task cue-10 --seed 0 --budget 40000

    # many runs, 2 at a time, appended to a JSONL file (runs already there are skipped),
    # then the table for benchmarks/RESULTS.md
    python benchmarks/memory_suite.py suite --agents ours:masked rppo \\
        --tasks repeat-4 cue-10 --seeds 0 1 --budget 50000 --jobs 2 \\
        --out benchmarks/out/memory_suite.jsonl --markdown
    python benchmarks/memory_suite.py table --out benchmarks/out/memory_suite.jsonl

An agent spec of `suite` is `rppo`, `dqn`, `ours:PRESET` or
`ours:PRESET:FIELD=VALUE,FIELD=VALUE`.
This file imports only the standard library at the top, so the peers' venv runs it too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from overrides import parse_overrides  # noqa: E402  (a sibling module, standard library only)

MEMORY_MODULE = HERE.parent / "r2d2_agent" / "envs" / "memory.py"
EVAL_EPISODES = 20

#: name -> (constructor in r2d2_agent.envs.memory or "cartpole"/"masked", kwargs,
#: default evaluation interval in env steps)
TASKS: dict[str, tuple[str, dict[str, Any], int]] = {
    "tmaze-5": ("TMaze", {"length": 5}, 2_500),
    "tmaze-20": ("TMaze", {"length": 20}, 2_500),
    "tmaze-35": ("TMaze", {"length": 35}, 2_500),
    "tmaze-50": ("TMaze", {"length": 50}, 2_500),
    "cue-10": ("CueRecall", {"delay": 10, "symbols": 4}, 2_500),
    "cue-30": ("CueRecall", {"delay": 30, "symbols": 4}, 2_500),
    "cue-45": ("CueRecall", {"delay": 45, "symbols": 4}, 2_500),
    "cue-60": ("CueRecall", {"delay": 60, "symbols": 4}, 2_500),
    "repeat-3": ("RepeatPrevious", {"k": 3, "symbols": 4, "length": 50}, 2_500),
    "repeat-4": ("RepeatPrevious", {"k": 4, "symbols": 4, "length": 50}, 2_500),
    "repeat-8": ("RepeatPrevious", {"k": 8, "symbols": 4, "length": 50}, 2_500),
    "repeat-6x8": ("RepeatPrevious", {"k": 6, "symbols": 8, "length": 40}, 2_500),
    # Held out at stop 46: sizes no setting was chosen on, run once with the README's rules
    "tmaze-12": ("TMaze", {"length": 12}, 2_500),
    "cue-20x6": ("CueRecall", {"delay": 20, "symbols": 6}, 2_500),
    "repeat-2x6": ("RepeatPrevious", {"k": 2, "symbols": 6, "length": 30}, 2_500),
    # Held out at stop 50: a size the train-interval rule was not chosen on
    "tmaze-16": ("TMaze", {"length": 16}, 2_500),
    # Held out at stop 51: the 64-step window's sizes the rule of stop 50 was not chosen on
    "tmaze-24": ("TMaze", {"length": 24}, 2_500),
    "cue-25x5": ("CueRecall", {"delay": 25, "symbols": 5}, 2_500),
    # Held out at stop 55: a 64-step size near the window's end, a 128-step cue of 3 symbols
    "tmaze-28": ("TMaze", {"length": 28}, 2_500),
    "cue-40x3": ("CueRecall", {"delay": 40, "symbols": 3}, 2_500),
    # Held out at stop 59: short-window sizes the 16/32-step train-interval rule was not
    # chosen on (cue-10 above, never run before, is one too)
    "tmaze-8": ("TMaze", {"length": 8}, 2_500),
    "repeat-5x5": ("RepeatPrevious", {"k": 5, "symbols": 5, "length": 40}, 2_500),
    "masked-cartpole": ("masked", {}, 5_000),
    "noisy-masked-cartpole": ("NoisyMaskedCartPole", {"noise_std": 0.05}, 5_000),
    "cartpole": ("cartpole", {}, 5_000),
    "acrobot": ("acrobot", {}, 5_000),
}
CARTPOLE_RANGE = (0.0, 500.0)
ACROBOT_RANGE = (-500.0, 0.0)  # -1 per step until the goal, 500 steps at most
PRESETS = ("masked", "memory", "cartpole")
"""`ours`' presets: `presets.masked_cartpole_config`, `memory_config`, `cartpole_config`."""
SOLVED_LEVELS = {"acrobot": 0.6}
"""Normalised mean that counts as solved where it is not 0.9: Gymnasium's
`reward_threshold` (Acrobot-v1: -100, i.e. 0.6; CartPole-v1's 475 is 0.9)."""


def load_memory_module() -> Any:
    """`r2d2_agent.envs.memory`: imported from the package when it is importable with
    TensorFlow's venv, else loaded by file path (the peers' venv)."""
    try:
        import r2d2_agent.envs.memory as memory  # noqa: PLC0415

        return memory
    except ImportError:
        spec = importlib.util.spec_from_file_location("memory_tasks", MEMORY_MODULE)
        assert spec is not None and spec.loader is not None
        memory = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(memory)
        return memory


def make_task(task: str, reward_scale: float = 1.0) -> tuple[Any, tuple[float, float]]:
    """A fresh env of the task (rewards multiplied by `reward_scale`) and its score range."""
    import gymnasium as gym  # noqa: PLC0415

    memory = load_memory_module()
    kind, kwargs, _ = TASKS[task]
    if kind == "cartpole":
        env, score_range = gym.make("CartPole-v1"), CARTPOLE_RANGE
    elif kind == "masked":
        env, score_range = memory.MaskedCartPole(gym.make("CartPole-v1")), CARTPOLE_RANGE
    elif kind == "acrobot":
        env, score_range = gym.make("Acrobot-v1"), ACROBOT_RANGE
    else:
        env = getattr(memory, kind)(**kwargs)
        score_range = env.score_range
    if reward_scale != 1.0:
        env = gym.wrappers.TransformReward(env, lambda r: r * reward_scale)
    return env, score_range


def summarise_curve(
    curve: list[tuple[float, ...]], score_range: tuple[float, float], threshold: float
) -> dict[str, Any]:
    """Best/final normalised means, first step at the threshold, and whether it stays.

    Each point of `curve` is `(env_steps, mean)` or `(env_steps, mean, train_seconds)`
    (training wall seconds so far, evaluations left out); a point of the summary's curve
    is `[env_steps, mean, normalised mean]`, plus the train seconds when given.
    """
    low, high = score_range
    norm = [(p[0], 2.0 * (p[1] - low) / (high - low) - 1.0) for p in curve]
    solved = [i for i, (_, n) in enumerate(norm) if n >= threshold - 1e-9]
    first = solved[0] if solved else None
    return {
        "curve": [
            [p[0], round(p[1], 4), round(n, 4), *(round(t, 1) for t in p[2:3])]
            for p, (_, n) in zip(curve, norm, strict=True)
        ],
        "best": round(max(n for _, n in norm), 4) if norm else None,
        "final": round(norm[-1][1], 4) if norm else None,
        "solved_at": norm[first][0] if first is not None else None,
        "stays_solved": first is not None and all(n >= threshold - 1e-9 for _, n in norm[first:]),
    }


# ---------------------------------------------------------------------------- ours


def preset_config(
    preset: str, shape: tuple[int, ...], actions: int, seed: int, overrides: dict[str, Any]
) -> Any:
    """The `R2D2Config` of `preset` (`PRESETS`) for a task's observation shape and action
    count, seeded, with `overrides` (as a user would call the preset)."""
    from r2d2_agent import presets  # noqa: PLC0415

    if preset == "memory":
        return presets.memory_config(shape, actions, seed=seed, **overrides)
    make = presets.cartpole_config if preset == "cartpole" else presets.masked_cartpole_config
    return make(input_shape=shape, nb_actions=actions, seed=seed, **overrides)


def train_seconds_to(record: dict[str, Any], level: float) -> float | None:
    """Training wall seconds until a run's greedy evaluation first reached `level`
    (normalised); None if it never did or its curve has no times (older records)."""
    for point in record.get("curve", []):
        if point[2] >= level - 1e-9:
            return point[3] if len(point) > 3 else None
    return None


def log_eval(point: tuple[float, ...], start: float) -> None:
    """One progress line on stderr per evaluation (the suite keeps it in a log file)."""
    steps, mean = point[:2]
    wall = time.perf_counter() - start
    print(f"[eval] env_steps={steps} mean={mean:.3f} wall={wall:.0f}s", file=sys.stderr, flush=True)


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    """Our single-process R2D2Agent, trained in chunks with a greedy evaluation after each."""
    from r2d2_agent.compat import tf  # noqa: PLC0415

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import numpy as np  # noqa: PLC0415

    from r2d2_agent import R2D2Agent  # noqa: PLC0415

    train_env, score_range = make_task(args.task, args.reward_scale)
    eval_env, _ = make_task(args.task)
    shape, actions = train_env.observation_space.shape, int(train_env.action_space.n)
    config = preset_config(args.preset, shape, actions, args.seed, parse_overrides(args.set))
    agent = R2D2Agent(config)
    agent.compile()
    if config.envs_per_actor > 1:  # N envs (`envs_per_actor=N` in the agent spec)
        more = [
            make_task(args.task, args.reward_scale)[0] for _ in range(config.envs_per_actor - 1)
        ]
        train_env = [train_env, *more]
    eval_env.reset(seed=10_000 + args.seed)
    curve: list[tuple[int, float, float]] = []
    train_wall = 0.0
    start = time.perf_counter()
    steps = 0
    while steps < args.budget:
        chunk = min(args.eval_every, args.budget - steps)
        t0 = time.perf_counter()
        agent.fit(train_env, nb_steps=chunk, verbose=0)
        train_wall += time.perf_counter() - t0
        steps += chunk
        history = agent.test(eval_env, nb_episodes=EVAL_EPISODES, visualize=False, verbose=0)
        curve.append((steps, float(np.mean(history.history["episode_reward"])), train_wall))
        log_eval(curve[-1], start)
    wall = time.perf_counter() - start
    return {
        **summarise_curve(curve, score_range, args.threshold),
        "wall_s": round(wall, 1),
        "train_wall_s": round(train_wall, 1),
        "agent_detail": f"R2D2Agent, preset {args.preset}",
        "config": json.loads(json.dumps(dataclasses.asdict(config), default=str)),
    }


# ---------------------------------------------------------------------------- peers

PEERS = ("rppo", "dqn")
"""The peer agents (stable-baselines3 / sb3-contrib, run in the peers' venv)."""

DQN_ZOO: dict[str, dict[str, Any]] = {
    "acrobot": dict(
        learning_rate=6.3e-4,
        batch_size=128,
        buffer_size=50_000,
        learning_starts=0,
        gamma=0.99,
        target_update_interval=250,
        train_freq=4,
        gradient_steps=-1,
        exploration_fraction=0.12,
        exploration_final_eps=0.1,
        n_timesteps=100_000,
    ),
    "cartpole": dict(
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1_000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        n_timesteps=50_000,
    ),
}
"""SB3 DQN's tuned settings from rl-baselines3-zoo's `hyperparams/dqn.yml` (`Acrobot-v1`,
`CartPole-v1`; both with `net_arch=[256, 256]`). `exploration_fraction` is of the zoo's
`n_timesteps`; `run_dqn_here` keeps the schedule in env steps whatever the budget."""


def dqn_settings(task: str, budget: int) -> dict[str, Any]:
    """`DQN`'s keyword arguments for `task` (`DQN_ZOO`) and a budget of `budget` env steps:
    the ε ramp lasts as many env steps as in the zoo's run (as shared/peers/sb3_dqn.py
    keeps it), so `exploration_fraction` is rescaled to the budget (at most 1)."""
    settings = dict(DQN_ZOO[task])
    ramp = settings.pop("exploration_fraction") * settings.pop("n_timesteps")
    return settings | {"exploration_fraction": min(1.0, ramp / budget)}


def solved_level(task: str) -> float:
    """The normalised mean that counts as solved on `task` (`SOLVED_LEVELS`, else 0.9)."""
    return SOLVED_LEVELS.get(task, 0.9)


def learn_with_evaluations(
    model: Any, eval_env: Any, args: argparse.Namespace, before_eval: Callable[[], None]
) -> tuple[list[tuple[int, float, float]], float, float]:
    """Trains an SB3 `model` to `args.budget` env steps with a greedy evaluation of
    `EVAL_EPISODES` on `eval_env` every `args.eval_every` env steps (and one at the end if
    the last interval fell short); `before_eval` runs before each (e.g. to copy
    normalisation statistics). Returns the curve, the wall and the evaluations' wall."""
    import numpy as np  # noqa: PLC0415
    from stable_baselines3.common.callbacks import BaseCallback  # noqa: PLC0415
    from stable_baselines3.common.evaluation import evaluate_policy  # noqa: PLC0415
    from stable_baselines3.common.logger import Logger  # noqa: PLC0415

    curve: list[tuple[int, float, float]] = []
    eval_wall = [0.0]

    def evaluate(steps: int) -> None:
        t0 = time.perf_counter()
        trained = t0 - start - eval_wall[0]
        before_eval()
        returns, _ = evaluate_policy(
            model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True,
            return_episode_rewards=True,
        )  # fmt: skip
        curve.append((steps, float(np.mean(returns)), trained))
        eval_wall[0] += time.perf_counter() - t0
        log_eval(curve[-1], start)

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = args.eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += args.eval_every
                evaluate(self.num_timesteps)
            return True

    # A logger without outputs: SB3's default one makes a /tmp/SB3-<time> folder per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    start = time.perf_counter()
    model.learn(total_timesteps=args.budget, callback=Evaluate())
    if not curve or curve[-1][0] < args.budget:
        evaluate(model.num_timesteps)
    return curve, time.perf_counter() - start, eval_wall[0]


def run_rppo_here(args: argparse.Namespace) -> dict[str, Any]:
    """RecurrentPPO with the peers' rl-zoo masked-CartPole settings (in the peers' venv)."""
    import sb3_contrib  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from sb3_contrib import RecurrentPPO  # noqa: PLC0415
    from stable_baselines3.common.monitor import Monitor  # noqa: PLC0415
    from stable_baselines3.common.vec_env import (  # noqa: PLC0415
        DummyVecEnv,
        VecNormalize,
        sync_envs_normalization,
    )

    torch.set_num_threads(1)
    _, score_range = make_task(args.task)
    venv = VecNormalize(
        DummyVecEnv([lambda: make_task(args.task, args.reward_scale)[0] for _ in range(8)]),
        gamma=0.98,
    )
    eval_env = VecNormalize(
        DummyVecEnv([lambda: Monitor(make_task(args.task)[0])]), training=False, norm_reward=False
    )
    eval_env.seed(10_000 + args.seed)

    def lin(v: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * v

    model = RecurrentPPO(
        "MlpLstmPolicy",
        venv,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=lin(1e-3),
        clip_range=lin(0.2),
        policy_kwargs=dict(
            ortho_init=False,
            activation_fn=torch.nn.ReLU,
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        ),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    curve, wall, eval_wall = learn_with_evaluations(
        model, eval_env, args, lambda: sync_envs_normalization(venv, eval_env)
    )
    return {
        **summarise_curve(curve, score_range, args.threshold),
        "wall_s": round(wall, 1),
        "train_wall_s": round(wall - eval_wall, 1),
        "agent_detail": f"sb3-contrib {sb3_contrib.__version__} RecurrentPPO, rl-zoo "
        f"CartPoleNoVel settings (shared/peers/sb3_rppo.py), torch {torch.__version__}",
    }


def run_dqn_here(args: argparse.Namespace) -> dict[str, Any]:
    """SB3 DQN with rl-zoo's tuned settings for the task (`DQN_ZOO`; in the peers' venv)."""
    import stable_baselines3  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from stable_baselines3 import DQN  # noqa: PLC0415
    from stable_baselines3.common.monitor import Monitor  # noqa: PLC0415

    torch.set_num_threads(1)
    settings = dqn_settings(args.task, args.budget)
    train_env, score_range = make_task(args.task, args.reward_scale)
    eval_env = Monitor(make_task(args.task)[0])
    eval_env.reset(seed=10_000 + args.seed)
    model = DQN(
        "MlpPolicy",
        train_env,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=args.seed,
        device="cpu",
        verbose=0,
        **settings,
    )
    curve, wall, eval_wall = learn_with_evaluations(model, eval_env, args, lambda: None)
    return {
        **summarise_curve(curve, score_range, args.threshold),
        "wall_s": round(wall, 1),
        "train_wall_s": round(wall - eval_wall, 1),
        "agent_detail": f"stable-baselines3 {stable_baselines3.__version__} DQN, rl-zoo "
        f"tuned settings for the task, torch {torch.__version__}",
    }


PEER_RUNNERS = {"rppo": run_rppo_here, "dqn": run_dqn_here}


def check_dqn_task(task: str) -> None:
    """Stops with a message when rl-zoo has no tuned DQN settings for `task`."""
    if task not in DQN_ZOO:
        raise SystemExit(
            f"dqn runs with rl-zoo's tuned settings, which exist for {', '.join(DQN_ZOO)}; "
            f"not for task {task!r}"
        )


def peers_python(flag: str | None) -> str:
    path = (
        flag
        or os.environ.get("PEERS_PYTHON")
        or str(pathlib.Path.home() / ".peers-venv" / "bin" / "python")
    )
    if not pathlib.Path(path).exists():
        raise SystemExit(
            f"the peers' python {path!r} does not exist: create ~/.peers-venv (see "
            "benchmarks/RESULTS.md, 'Memory suite') or pass --peers-python / PEERS_PYTHON"
        )
    return path


def run_peer(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the peer `args.agent` (`PEER_RUNNERS`) in the peers' venv; returns its JSON line."""
    cmd = [peers_python(args.peers_python), str(HERE / "memory_suite.py"), "peer-worker"]
    cmd += ["--agent", args.agent, "--task", args.task, "--seed", str(args.seed)]
    cmd += ["--budget", str(args.budget), "--eval-every", str(args.eval_every)]
    cmd += ["--threshold", str(args.threshold), "--reward-scale", str(args.reward_scale)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)  # stderr: ours
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {args.agent} run failed (exit {proc.returncode})")
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------- commands


def agent_label(args: argparse.Namespace) -> str:
    if args.agent in PEERS:
        return args.agent
    return ":".join(["ours", args.preset] + ([",".join(args.set)] if args.set else []))


def cmd_one(args: argparse.Namespace) -> None:
    if args.eval_every is None:
        args.eval_every = TASKS[args.task][2]
    if args.threshold is None:
        args.threshold = solved_level(args.task)
    load = [round(x, 2) for x in os.getloadavg()]
    if args.worker:  # inside the peers' venv
        result = PEER_RUNNERS[args.agent](args)
    elif args.agent == "ours":
        result = run_ours(args)
    else:
        result = run_peer(args)
    result.update(
        agent=agent_label(args),
        task=args.task,
        seed=args.seed,
        budget=args.budget,
        eval_every=args.eval_every,
        threshold=args.threshold,
        reward_scale=args.reward_scale,
        load_average_at_start=load,
    )
    print(json.dumps(result), flush=True)


def parse_agent_spec(spec: str) -> list[str]:
    """`"ours:memory:gamma=0.9,n=5"` -> `one`'s arguments for that agent."""
    parts = spec.split(":", 2)
    if parts[0] in PEERS and len(parts) == 1:
        return ["--agent", parts[0]]
    if parts[0] != "ours" or len(parts) < 2 or parts[1] not in PRESETS:
        raise SystemExit(
            f"agent spec must be {' or '.join(PEERS)} or ours:{'|'.join(PRESETS)}[:F=V,...], "
            f"got {spec!r}"
        )
    out = ["--agent", "ours", "--preset", parts[1]]
    for pair in parts[2].split(",") if len(parts) == 3 else []:
        out += ["--set", pair.strip()]
    return out


def run_key(record: dict[str, Any]) -> tuple:
    return (
        record["agent"],
        record["task"],
        record["seed"],
        record["budget"],
        float(record["reward_scale"]),
    )


def read_records(path: pathlib.Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def cmd_suite(args: argparse.Namespace) -> None:
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {run_key(r) for r in read_records(out) if "error" not in r}
    jobs = []
    for task in args.tasks:
        for seed in args.seeds:
            for spec in args.agents:
                key = (spec, task, seed, args.budget, float(args.reward_scale))
                if key in done:
                    continue
                cmd = [sys.executable, str(HERE / "memory_suite.py"), "one"]
                cmd += parse_agent_spec(spec)
                cmd += ["--task", task, "--seed", str(seed), "--budget", str(args.budget)]
                cmd += ["--reward-scale", str(args.reward_scale)]
                if args.peers_python:
                    cmd += ["--peers-python", args.peers_python]
                jobs.append((key, cmd))

    logs = out.with_name(out.stem + "_logs")
    logs.mkdir(exist_ok=True)

    def run(job: tuple[tuple, list[str]]) -> dict[str, Any]:
        key, cmd = job
        name = "_".join(str(part) for part in key).replace(":", "-").replace("/", "-")
        log = logs / f"{name[:150]}.log"
        with log.open("w") as stderr:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            fields = ["agent", "task", "seed", "budget", "reward_scale"]
            return dict(zip(fields, key, strict=True)) | {"error": log.read_text()[-2000:]}
        return json.loads(lines[-1])

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for record in pool.map(run, jobs):
            with out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            brief = {k: record.get(k) for k in ("agent", "task", "seed", "best", "solved_at")}
            print(json.dumps(brief | {"wall_s": record.get("wall_s")}), flush=True)
            if "error" in record:
                print(record["error"], file=sys.stderr)
    if args.markdown:
        print(markdown_table(read_records(out), args.reward_scale))


def _median(values: list[float]) -> float:
    return statistics.median(values)


def markdown_table(records: list[dict[str, Any]], reward_scale: float = 1.0) -> str:
    """Rows by task, agents side by side: medians over seeds (per-seed values after)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in records:
        if "error" in r or float(r["reward_scale"]) != float(reward_scale):
            continue
        groups.setdefault((r["task"], r["agent"], r["budget"]), []).append(r)
    # the peer of a seed: RecurrentPPO's run where there is one, else DQN's
    peer_runs = [r for runs in groups.values() for r in runs if r["agent"] in PEERS]
    peer_runs.sort(key=lambda r: -PEERS.index(r["agent"]))
    peers = {(r["task"], r["budget"], r["seed"]): r for r in peer_runs}
    lines = [
        "| task | agent | budget | best greedy mean, median (per seed) | final | "
        "env steps to threshold, median (solved) | stays solved | wall s, median (train) | "
        "train s to the peer's best, median (reached) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = {name: i for i, name in enumerate(TASKS)}
    for (task, agent, budget), runs in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][2], kv[0][1] in PEERS)
    ):
        runs.sort(key=lambda r: r["seed"])
        best = " / ".join(f"{r['best']:.2f}" for r in runs)
        steps = [r["solved_at"] if r["solved_at"] is not None else budget for r in runs]
        n_solved = sum(r["solved_at"] is not None for r in runs)
        med_steps = _median(steps)
        steps_text = (
            f"{med_steps:,.0f}" if n_solved * 2 > len(runs) else f"> {budget:,}"
        ) + f" ({n_solved}/{len(runs)})"
        stays = sum(r["stays_solved"] for r in runs)
        lines.append(
            f"| {task} | {agent} | {budget:,} | {_median([r['best'] for r in runs]):.2f} "
            f"({best}) | {_median([r['final'] for r in runs]):.2f} | {steps_text} | "
            f"{stays}/{len(runs)} | {_median([r['wall_s'] for r in runs]):.0f} "
            f"({_median([r['train_wall_s'] for r in runs]):.0f}) | "
            f"{_to_the_peers_best(runs, peers)} |"
        )
    return "\n".join(lines)


def _to_the_peers_best(runs: list[dict[str, Any]], peers: dict[tuple, dict[str, Any]]) -> str:
    """Median train seconds until each run first matched the peer's best on its seed (the
    peer's own runs: until their best), and on how many seeds it did."""
    paired = [(r, peers.get((r["task"], r["budget"], r["seed"]))) for r in runs]
    paired = [(r, peer) for r, peer in paired if peer is not None]
    if not paired:
        return "no peer run"
    if not all(len(point) > 3 for r, peer in paired for point in r["curve"] + peer["curve"]):
        return "no times kept"  # records from before the curve kept them
    times = [train_seconds_to(r, peer["best"]) for r, peer in paired]
    reached = [t for t in times if t is not None]
    text = f"{_median(reached):.0f}" if reached else "-"
    return f"{text} ({len(reached)}/{len(paired)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--budget", type=int, default=60_000, help="training env steps")
        p.add_argument("--reward-scale", type=float, default=1.0)
        p.add_argument("--peers-python", default=None, help="python of the peers' venv")

    def run_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--task", choices=list(TASKS), required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--eval-every", type=int, default=None, help="env steps (per task)")
        p.add_argument(
            "--threshold",
            type=float,
            default=None,
            help="normalised mean that counts as solved (default: SOLVED_LEVELS, else 0.9)",
        )
        common(p)

    one = sub.add_parser("one", help="one agent x task x seed: one JSON line")
    one.add_argument("--agent", choices=["ours", *PEERS], required=True)
    one.add_argument("--preset", choices=PRESETS, default="masked")
    one.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    run_args(one)
    worker = sub.add_parser("peer-worker", help=argparse.SUPPRESS)
    worker.add_argument("--agent", choices=PEERS, required=True)
    run_args(worker)
    suite = sub.add_parser("suite", help="many runs appended to --out, then a table")
    suite.add_argument("--agents", nargs="+", default=["ours:masked", "rppo"])
    suite.add_argument("--tasks", nargs="+", default=list(TASKS))
    suite.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    suite.add_argument("--jobs", type=int, default=2, help="runs at once (1 thread each)")
    suite.add_argument("--out", required=True, help="JSONL file (appended)")
    suite.add_argument("--markdown", action="store_true")
    common(suite)
    table = sub.add_parser("table", help="the markdown table of a JSONL file")
    table.add_argument("--out", required=True)
    table.add_argument("--reward-scale", type=float, default=1.0)
    args = parser.parse_args()

    if args.command in ("one", "peer-worker"):
        args.worker = args.command == "peer-worker"
        if args.agent == "dqn":
            check_dqn_task(args.task)
        cmd_one(args)
    elif args.command == "suite":
        for spec in args.agents:
            parse_agent_spec(spec)
        for task in args.tasks:
            if task not in TASKS:
                raise SystemExit(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
        if "dqn" in args.agents:
            for task in args.tasks:
                check_dqn_task(task)
        if any(spec in PEERS for spec in args.agents):
            peers_python(args.peers_python)
        cmd_suite(args)
    else:
        print(markdown_table(read_records(pathlib.Path(args.out)), args.reward_scale))


if __name__ == "__main__":
    main()
