"""`r2d2-train`: train R2D2 on any Gymnasium env with one command (as rl-zoo's `train.py`).

    r2d2-train CartPole-v1 --preset cartpole --actors 2
    r2d2-train Acrobot-v1 --preset cartpole --set lstm_units=128 --nb-steps 100000
    r2d2-train ALE/Pong-v5 --config pong.toml --actors 4 --max-seconds 3600
    r2d2-train CartPole-v1 --preset cartpole --resume runs/CartPole-v1__r2d2__0__1700000000
    r2d2-train ALE/Breakout-v5 --dry-run      # check everything, print the config, stop
    r2d2-train ALE/Breakout-v5 --envpool --set envs_per_actor=32   # envs stepped in C++

The configuration is built in layers, each over the one before: `R2D2Config`'s defaults
(the paper's) or a preset (`--preset cartpole`: `r2d2_agent.presets.cartpole_config`), a
config file (`--config FILE`, TOML or YAML: a flat table of `R2D2Config` fields), the
env's spaces (`input_shape`, `nb_actions`, `input_type`; ALE games: 84x84 gray frames,
4 stacked) and `--seed`, then `--set field=value` (repeatable; Python literals, e.g.
`--set input_shape="(4,)" --set input_type=GRAY_2ch`). A replay whose size nobody chose
is made to fit in half of the available memory.

Everything is checked before any process starts (the env id, the preset, the file, each
field, the config, the replay's size, the checkpoint to resume); a bad value ends the
command with exit status 2 and a message naming it. A run writes one run directory:
`run.json`, JSON lines per process, `tensorboard/`, `checkpoints/`, `learning_curve.png`
and `result.json` (the outcome and every evaluation). While training, a greedy evaluation
every `--eval-interval` env steps stops the run at `--stop-return` (default: the env's
reward threshold); at the end the learner's final weights are evaluated (the greedy
policy's: their moving average with `policy_average_updates`, as the presets set), and
the weights of the best evaluation are written to `best_weights.h5` (load them with
`R2D2Agent.load_weights`: a run's final weights are not always its best). `--resume
RUN_DIR` continues a run in its own directory (nb_steps counts the checkpoint's env
steps; `best_weights.h5` is replaced only by a better evaluation).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import inspect
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from r2d2_agent import presets
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback
from r2d2_agent.checkpoints import (
    CheckpointError,
    check_compatible,
    read_checkpoint,
    resolve_checkpoint,
    write_checkpoint,
)
from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.distributed import R2D2Manager
from r2d2_agent.distributed.spec import TrainLimits
from r2d2_agent.envs import is_atari_id, make_env
from r2d2_agent.envs.atari import ATARI_FRAME_SHAPE
from r2d2_agent.plot import plot_run
from r2d2_agent.replay import estimate_replay_bytes, largest_memory_capacity
from r2d2_agent.replay.sizing import available_memory_bytes
from r2d2_agent.runlog import write_json_atomic

__all__ = ["BEST_FILE", "PRESETS", "RESULT_FILE", "TrainPlan", "UsageError", "main", "plan_run"]

logger = logging.getLogger(__name__)

PRESETS = {
    name.removesuffix("_config"): function
    for name, function in vars(presets).items()
    if name.endswith("_config")
    and not name.startswith("_")
    and inspect.isfunction(function)
    and function.__module__ == presets.__name__
}
"""Every public preset of `r2d2_agent.presets`, by name without its `_config` suffix."""

RESULT_FILE = "result.json"
"""The run's outcome in its run directory: the `TrainResult` counters, every evaluation,
the best one and whether it reached the stop return."""
BEST_FILE = "best_weights.h5"
"""The best evaluation's weights in the run directory (a checkpoint without replay)."""

_EXIT_CODES = {"interrupted": 130, "sigterm": 143, "sighup": 129}
"""The command's exit code after a stop from outside (128 + the signal's number, as a
shell reports a process killed by it); 0 after any other stop."""

FIELDS = {f.name for f in dataclasses.fields(R2D2Config)}
ENV_FIELDS = ("input_shape", "nb_actions", "input_type", "input_sequence")
"""Fields the env's spaces decide unless a config file or `--set` gives them."""


class UsageError(ValueError):
    """A bad argument: the message names it and what to give instead."""


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """Everything a run needs, checked (`plan_run`), before any process starts."""

    env_id: str
    env_factory: Any
    config: R2D2Config
    image_model: Any
    actors: int
    backend: str
    ray_address: str | None
    run_dir: str
    resume_from: str | None
    nb_steps: int | None
    max_seconds: float | None
    checkpoint_interval: int
    keep_checkpoints: int
    eval_interval: int
    eval_episodes: int
    stop_return: float | None
    progress: bool
    notes: tuple[str, ...] = ()
    """What the command decided for you (e.g. a replay sized to the memory)."""
    actor_env_factory: Any = None
    """Each actor's envs when they differ from `env_factory`'s (`--envpool`: one envpool
    batch of `envs_per_actor` games); `env_factory` still makes the evaluation's env."""


# Reading the configuration ---------------------------------------------------------------


def _parse_value(text: str) -> Any:
    """A Python literal (`128`, `2e-3`, `(84, 84)`, `None`, `True`), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _check_fields(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Checks the names against `R2D2Config`'s fields; makes an `input_type` given by
    name an `InputType` and a list `input_shape` a tuple."""
    checked = {}
    for name, value in values.items():
        if name not in FIELDS:
            close = difflib.get_close_matches(name, sorted(FIELDS), n=1)
            hint = (
                f"; did you mean {close[0]}?" if close else f"; fields: {', '.join(sorted(FIELDS))}"
            )
            raise UsageError(f"{where}: {name!r} is not an R2D2Config field{hint}")
        if name == "input_type" and isinstance(value, str):
            if value not in InputType.__members__:
                raise UsageError(
                    f"{where}: input_type={value!r}; one of {', '.join(InputType.__members__)}"
                )
            value = InputType[value]
        if name == "input_shape" and isinstance(value, list):
            value = tuple(value)
        checked[name] = value
    return checked


def read_config_file(path: str) -> dict[str, Any]:
    """A flat table of `R2D2Config` fields from a TOML (`.toml`) or YAML (`.yaml`, `.yml`)
    file.

    Raises:
        UsageError: If the file is missing, unreadable, of another kind, or not a table.
    """
    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: no such file")
    suffix = os.path.splitext(path)[1].lower()
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            with open(path, "rb") as file:
                data = tomllib.load(file)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as exc:
                raise UsageError(
                    f"--config {path}: YAML files need PyYAML (pip install pyyaml)"
                ) from exc
            with open(path, encoding="utf-8") as file:
                data = yaml.safe_load(file) or {}
        else:
            raise UsageError(f"--config {path}: give a .toml, .yaml or .yml file")
    except UsageError:
        raise
    except Exception as exc:  # the parsers' own errors name the line
        raise UsageError(f"--config {path}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a table of R2D2Config fields")
    return _check_fields(data, f"--config {path}")


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """`--set field=value` arguments as fields.

    Raises:
        UsageError: On an item without `=` or an unknown field.
    """
    values = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set {item!r}: give field=value, e.g. --set lstm_units=128")
        values[name.strip()] = _parse_value(text.strip())
    return _check_fields(values, "--set")


def _env_fields(env: Any, atari: bool) -> dict[str, Any]:
    """`input_shape`, `nb_actions`, `input_type` (and for ALE games `input_sequence`) from
    the env's spaces."""
    import gymnasium

    if not isinstance(env.action_space, gymnasium.spaces.Discrete):
        raise UsageError(f"the env's actions are {env.action_space}; R2D2 needs Discrete ones")
    space = env.observation_space
    shape = tuple(int(d) for d in space.shape)
    fields: dict[str, Any] = {"input_shape": shape, "nb_actions": int(env.action_space.n)}
    image = np.dtype(space.dtype) == np.uint8
    if atari:
        fields.update(input_shape=ATARI_FRAME_SHAPE, input_type=InputType.GRAY_2ch)
        fields["input_sequence"] = 4
    elif image and len(shape) == 3:
        fields["input_type"] = InputType.COLOR
    elif image and len(shape) == 2:
        fields["input_type"] = InputType.GRAY_2ch
    else:
        fields["input_type"] = InputType.VALUES
    return fields


def _preset(
    name: str,
    env_fields: dict[str, Any],
    memory_span: int | None = None,
    each_step_scored: bool = False,
) -> R2D2Config:
    """The preset `name`, given the env's fields its function requires (`memory_config`
    takes the observation shape and the action count), `--memory-span` and
    `--each-step-scored`."""
    function = PRESETS[name]
    parameters = inspect.signature(function).parameters
    required = {
        parameter.name
        for parameter in parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }
    extra: dict[str, Any] = {}
    for field, value in (("memory_span", memory_span), ("each_step_scored", each_step_scored)):
        if value is None or value is False:  # not given
            continue
        if field not in parameters:
            takes = sorted(
                n for n, f in PRESETS.items() if field in inspect.signature(f).parameters
            )
            option = "--" + field.replace("_", "-")
            raise UsageError(f"{option} is for the presets {', '.join(takes)}, not --preset {name}")
        extra[field] = value
    try:
        return function(**{field: env_fields[field] for field in required}, **extra)
    except ValueError as exc:
        raise UsageError(f"--preset {name}: {exc}") from exc


def _fit_replay(config: R2D2Config, explicit: bool, notes: list[str]) -> R2D2Config:
    """A replay nobody sized is made to fit in half of the available memory."""
    available = available_memory_bytes()
    if explicit or available is None or estimate_replay_bytes(config) <= available // 2:
        return config
    capacity = largest_memory_capacity(config, available // 2)
    if capacity < config.batch_size:
        raise UsageError(
            f"no replay of batch_size={config.batch_size} sequences fits in half of the "
            f"available memory ({available / 2**30:.1f} GiB); make the sequences shorter"
        )
    notes.append(
        f"memory_capacity={capacity} (the default's replay does not fit in half of the "
        f"available memory; --set memory_capacity=N to choose)"
    )
    return config.replace(memory_capacity=capacity, memory_warmup=min(config.warmup, capacity))


# The plan ----------------------------------------------------------------------------------


def _resume_paths(resume: str | None, run_dir: str | None) -> tuple[str | None, str | None]:
    """(checkpoint path, run directory): `--resume RUN_DIR` continues in that directory
    from its `checkpoints/`; a checkpoint file or directory continues in `--run-dir` or a
    new one."""
    if resume is None:
        return None, run_dir
    resume = os.path.abspath(resume)
    inside = os.path.join(resume, "checkpoints")
    if os.path.isdir(inside):
        return inside, run_dir or resume
    try:
        resolve_checkpoint(resume)
    except CheckpointError as exc:
        raise UsageError(f"--resume {resume}: {exc}") from exc
    return resume, run_dir


def plan_run(args: argparse.Namespace) -> TrainPlan:
    """Checks every argument and builds the run's plan; no process starts.

    Raises:
        UsageError: Naming the bad argument.
    """
    import gymnasium

    if args.preset is not None and args.preset not in PRESETS:
        raise UsageError(f"--preset {args.preset!r}: one of {', '.join(sorted(PRESETS))}")
    if args.actors < 1:
        raise UsageError(f"--actors {args.actors}: at least 1")
    file_values = read_config_file(args.config) if args.config else {}
    overrides = parse_overrides(args.set)
    env_factory = functools.partial(make_env, args.env_id, args.life_loss)
    try:
        probe = env_factory()
    except (gymnasium.error.Error, ImportError) as exc:
        raise UsageError(f"{args.env_id}: {exc}") from exc
    try:
        atari = is_atari_id(args.env_id)
        from_env = _env_fields(probe, atari)
        threshold = getattr(probe.spec, "reward_threshold", None)
    finally:
        probe.close()
    for option, given in (
        ("--memory-span", args.memory_span is not None),
        ("--each-step-scored", args.each_step_scored),
    ):
        if given and not args.preset:
            raise UsageError(f"{option} goes with --preset memory")
    base = (
        _preset(args.preset, from_env, args.memory_span, args.each_step_scored)
        if args.preset
        else None
    )
    from_env = {k: v for k, v in from_env.items() if k not in file_values and k not in overrides}
    values = dataclasses.asdict(base) if base else {}
    values.update(file_values)
    values.update(from_env)
    if args.seed is not None:
        values["seed"] = args.seed
    elif values.get("seed") is None:
        values["seed"] = 0
    values.update(overrides)
    try:
        config = R2D2Config(**values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"the configuration: {exc}") from exc
    notes: list[str] = []
    explicit = "memory_capacity" in file_values or "memory_capacity" in overrides
    config = _fit_replay(config, explicit or base is not None, notes)
    resume_from, run_dir = _resume_paths(args.resume, args.run_dir)
    if resume_from is not None:  # the weights only; train() checks the replay's checksums
        try:
            check_compatible(read_checkpoint(resume_from, verify_replay=False), config)
        except CheckpointError as exc:
            raise UsageError(f"--resume {args.resume}: {exc}") from exc
    try:
        TrainLimits(nb_steps=args.nb_steps, max_seconds=args.max_seconds)
    except ValueError as exc:
        raise UsageError(f"the limits: {exc}") from exc
    if run_dir is None:
        name = f"{args.env_id.replace('/', '_')}__r2d2__{config.seed}__{int(time.time())}"
        run_dir = os.path.join("runs", name)
    image = config.is_image
    eval_interval = (
        args.eval_interval if args.eval_interval is not None else (0 if image else 2_500)
    )
    eval_episodes = args.eval_episodes if args.eval_episodes is not None else (3 if image else 10)
    stop_return = (
        None if args.no_stop else (args.stop_return if args.stop_return is not None else threshold)
    )
    actor_env_factory = _envpool_factory(args, config, atari) if args.envpool else None
    image_model = None
    if image:
        from r2d2_agent.image_models import DQNImageModel, R2D3ImageModel

        image_model = R2D3ImageModel() if args.image_model == "r2d3" else DQNImageModel()
    return TrainPlan(
        env_id=args.env_id,
        env_factory=env_factory,
        config=config,
        image_model=image_model,
        actors=args.actors,
        backend=args.backend,
        ray_address=args.ray_address,
        run_dir=os.path.abspath(run_dir),
        resume_from=resume_from,
        nb_steps=args.nb_steps,
        max_seconds=args.max_seconds,
        checkpoint_interval=args.checkpoint_interval,
        keep_checkpoints=args.keep_checkpoints,
        eval_interval=eval_interval,
        eval_episodes=eval_episodes,
        stop_return=stop_return,
        progress=not args.quiet,
        notes=tuple(notes),
        actor_env_factory=actor_env_factory,
    )


def _envpool_factory(args: argparse.Namespace, config: R2D2Config, atari: bool) -> Any:
    """`--envpool`: each actor's `envs_per_actor` ALE games in one envpool batch.

    Raises:
        UsageError: For a game that is not ALE v5, or without envpool installed.
    """
    from r2d2_agent.envs import EnvPoolAtari

    if not atari:
        raise UsageError(f"--envpool steps ALE games; {args.env_id} is not one")
    try:
        factory = EnvPoolAtari(args.env_id, config.envs_per_actor, args.life_loss)
        factory().close()  # envpool is installed and knows the game
    except (ValueError, ImportError) as exc:
        raise UsageError(f"--envpool: {exc}") from exc
    return factory


# The run -----------------------------------------------------------------------------------


class _Evaluations:
    """`on_progress`: a greedy evaluation every `plan.eval_interval` env steps, logged as a
    point of the learning curve; stops the run once one reaches `plan.stop_return`. Keeps
    the best evaluation's weights for `write_best` (a resumed run starts from the best of
    the runs before, as its `result.json` and `best_weights.h5` recorded it)."""

    def __init__(self, plan: TrainPlan, manager: R2D2Manager, run_log: RunLogCallback) -> None:
        self.plan, self.manager, self.run_log = plan, manager, run_log
        self.records: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = _recorded_best(plan.run_dir)
        self._best_weights: list[np.ndarray] | None = None
        self._next = plan.eval_interval
        self._env: Any = None

    def evaluate(self, env_steps: int, weights: list[np.ndarray]) -> dict[str, Any]:
        """Plays `eval_episodes` greedy episodes with `weights`; records and logs them."""
        if self._env is None:
            self._env = self.plan.env_factory()
        returns = self.manager.evaluate(self.plan.eval_episodes, self._env, weights=weights)
        self.run_log.log_evaluation(env_steps, returns)
        record = {"env_steps": int(env_steps), "mean_return": float(np.mean(returns))}
        self.records.append(record)
        if self.best is None or record["mean_return"] > self.best["mean_return"]:
            self.best, self._best_weights = record, [np.array(w, copy=True) for w in weights]
        return record

    def __call__(self, progress: Any) -> None:
        if not self.plan.eval_interval or progress.env_steps < self._next:
            return
        self._next = progress.env_steps + self.plan.eval_interval
        weights = self.manager.latest_weights()
        if weights is None:  # no publication yet
            return
        record = self.evaluate(progress.env_steps, weights)
        print(f"\n{record['env_steps']} env steps: greedy mean return {record['mean_return']:.1f}")
        stop = self.plan.stop_return
        if stop is not None and record["mean_return"] >= stop:
            print(f"reached the stop return {stop:g}: stopping", flush=True)
            self.manager.request_stop()

    def write_best(self) -> str | None:
        """Writes the best evaluation's weights to `BEST_FILE` in the run directory if this
        run found a new best: a checkpoint (the run's last one with these online and target
        weights, no replay) that `R2D2Agent.load_weights` reads.

        Returns:
            The file holding the best weights (None if no evaluation has any).
        """
        path = os.path.join(self.plan.run_dir, BEST_FILE)
        if self._best_weights is None:
            return path if self.best is not None else None
        try:
            last = read_checkpoint(os.path.join(self.plan.run_dir, "checkpoints"), False)
        except CheckpointError as exc:
            logger.warning("the best evaluation's weights are not written: %s", exc)
            return None
        return write_checkpoint(path, last.with_weights(self._best_weights))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


def _recorded_best(run_dir: str) -> dict[str, Any] | None:
    """The best evaluation a run before in `run_dir` recorded with its weights (None if
    there is none: a new run, or a `result.json` or `best_weights.h5` missing)."""
    try:
        with open(os.path.join(run_dir, RESULT_FILE)) as file:
            best = json.load(file).get("best_evaluation")
    except (OSError, ValueError):
        return None
    if not best or not os.path.exists(os.path.join(run_dir, BEST_FILE)):
        return None
    return best


def open_manager(plan: TrainPlan) -> tuple[R2D2Manager, RunLogCallback]:
    """The run's manager with its run directory and checkpoints; it checks the env, the
    config and the replay's size in this process, before any child starts.

    Raises:
        TypeError, ValueError, ImportError: As `R2D2Manager` does.
    """
    run_log = RunLogCallback(plan.run_dir)
    checkpoints = CheckpointCallback(
        os.path.join(plan.run_dir, "checkpoints"),
        interval=plan.checkpoint_interval,
        keep=plan.keep_checkpoints,
    )
    ray = {"ray_address": plan.ray_address} if plan.backend == "ray" else {}
    manager = R2D2Manager(
        plan.actor_env_factory or plan.env_factory,
        plan.config,
        actor_num=plan.actors,
        image_model=plan.image_model,
        callbacks=[run_log, checkpoints],
        progress=plan.progress,
        backend=plan.backend,
        **ray,
    )
    return manager, run_log


def run(plan: TrainPlan, manager: R2D2Manager, run_log: RunLogCallback) -> dict[str, Any]:
    """Trains as planned, evaluates the final weights, writes `result.json`.

    Returns:
        What `result.json` holds.
    """
    with manager:
        evaluations = _Evaluations(plan, manager, run_log)
        try:
            result = manager.train(
                nb_steps=plan.nb_steps,
                max_seconds=plan.max_seconds,
                resume_from=plan.resume_from,
                on_progress=evaluations,
            )
            print(
                f"stopped by {result.stop_reason}: {result.env_steps} env steps, "
                f"{result.learner_updates} learner updates in {result.elapsed_seconds:.1f} s",
                flush=True,
            )
            final = None
            weights = manager.latest_weights()
            if not result.interrupted and plan.eval_episodes > 0 and weights is not None:
                final = evaluations.evaluate(result.env_steps, weights)
                print(f"final greedy evaluation: mean return {final['mean_return']:.1f}")
            best_file = evaluations.write_best()
        finally:
            evaluations.close()
    best = evaluations.best
    if best_file is not None:
        print(
            f"best greedy evaluation: mean return {best['mean_return']:.1f} at "
            f"{best['env_steps']} env steps; its weights: {best_file}",
            flush=True,
        )
    summary = {
        "env_id": plan.env_id,
        "stop_reason": result.stop_reason,
        "stop_detail": result.stop_detail,
        "env_steps": result.env_steps,
        "learner_updates": result.learner_updates,
        "episodes": result.episodes,
        "elapsed_seconds": result.elapsed_seconds,
        "resumed_from": result.resumed_from,
        "evaluations": evaluations.records,
        "final_evaluation": final,
        "best_evaluation": best,
        "best_weights": best_file,
        "stop_return": plan.stop_return,
        "reached_stop_return": (
            plan.stop_return is not None
            and best is not None
            and best["mean_return"] >= plan.stop_return
        ),
    }
    write_json_atomic(os.path.join(plan.run_dir, RESULT_FILE), summary)
    try:  # the curve with every evaluation, the final one included
        plot_run(plan.run_dir)
    except (OSError, ValueError) as exc:  # a failed picture must not fail the run
        logger.warning("could not draw the learning curve: %s", exc)
    return summary


def _resume_command(argv: Sequence[str], run_dir: str) -> str:
    """This command again, continuing in `run_dir`."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--resume", "--run-dir"):
            skip = True
        elif not arg.startswith(("--resume=", "--run-dir=")) and arg != "--dry-run":
            kept.append(arg)
    return shlex.join(["r2d2-train", *kept, "--resume", run_dir])


# The command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """`r2d2-train`'s arguments."""
    parser = argparse.ArgumentParser(
        prog="r2d2-train",
        description="Train R2D2 (an R2D2Manager: actor processes + a learner) on a Gymnasium env.",
        epilog="Configuration layers: defaults or --preset, --config, the env's spaces and "
        "--seed, --set. See the README's 'One command' section.",
    )
    parser.add_argument("env_id", help="a registered Gymnasium id, e.g. CartPole-v1 or ALE/Pong-v5")
    config = parser.add_argument_group("configuration")
    config.add_argument(
        "--preset", help=f"a preset of r2d2_agent.presets: {', '.join(sorted(PRESETS))}"
    )
    config.add_argument(
        "--memory-span",
        type=int,
        help="with --preset memory: env steps from an observation to the action that needs "
        "it (sets the trained window, above twice the span; default 7: 16 steps)",
    )
    config.add_argument(
        "--each-step-scored",
        action="store_true",
        help="with --preset memory: every action is scored by its own reward at once and does "
        "not change what comes next (recall what was seen k steps ago): γ 0",
    )
    config.add_argument("--config", help="a TOML or YAML file of R2D2Config fields")
    config.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="an R2D2Config field, last word (repeatable), e.g. --set lstm_units=128",
    )
    config.add_argument("--seed", type=int, help="global seed; actor i uses seed + i (default 0)")
    config.add_argument("--image-model", choices=["dqn", "r2d3"], default="dqn", help="image torso")
    config.add_argument("--life-loss", action="store_true", help="ALE: a life lost ends an episode")
    config.add_argument(
        "--envpool",
        action="store_true",
        help="ALE: step each actor's envs_per_actor games in C++ with envpool "
        '(pip install "r2d2-agent[envpool]")',
    )
    run = parser.add_argument_group("run")
    run.add_argument("--actors", type=int, default=2, help="actor processes (default 2)")
    run.add_argument("--backend", choices=["multiprocessing", "ray"], default="multiprocessing")
    run.add_argument("--ray-address", help="with --backend ray: the cluster (default: a local Ray)")
    run.add_argument(
        "--nb-steps", type=int, default=100_000, help="env steps in all (default 100,000)"
    )
    run.add_argument("--max-seconds", type=float, help="wall-time limit")
    run.add_argument("--run-dir", help="run directory (default: runs/<env>__r2d2__<seed>__<time>)")
    run.add_argument("--resume", help="a run directory, checkpoint directory or checkpoint file")
    run.add_argument(
        "--checkpoint-interval", type=int, default=1_000, help="learner updates between checkpoints"
    )
    run.add_argument("--keep-checkpoints", type=int, default=3, help="checkpoints kept")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar, warnings only")
    run.add_argument(
        "--dry-run", action="store_true", help="check everything and print the plan; train nothing"
    )
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument(
        "--eval-interval",
        type=int,
        help="env steps between greedy evaluations (default 2,500; images: 0, none)",
    )
    evaluation.add_argument(
        "--eval-episodes", type=int, help="episodes per evaluation (default 10; images: 3)"
    )
    evaluation.add_argument(
        "--stop-return",
        type=float,
        help="stop once an evaluation reaches it (default: the env's reward threshold)",
    )
    evaluation.add_argument("--no-stop", action="store_true", help="never stop on an evaluation")
    return parser


def _text(value: Any) -> str:
    """A config value as you would write it after --set."""
    return value.name if isinstance(value, InputType) else repr(value)


def _describe(plan: TrainPlan) -> str:
    changed = {
        f.name: getattr(plan.config, f.name)
        for f in dataclasses.fields(R2D2Config)
        if getattr(plan.config, f.name) != f.default
    }
    lines = [
        f"env: {plan.env_id}{' (envpool)' if plan.actor_env_factory else ''}; "
        f"{plan.actors} actor(s), backend {plan.backend}",
        "config (fields other than R2D2Config's defaults): "
        + ", ".join(f"{name}={_text(value)}" for name, value in changed.items()),
        f"run directory: {plan.run_dir}",
        f"limits: nb_steps={plan.nb_steps}, max_seconds={plan.max_seconds}",
        (
            f"evaluation: every {plan.eval_interval} env steps"
            if plan.eval_interval
            else "evaluation: at the end only"
        )
        + f", {plan.eval_episodes} episodes, stop return {plan.stop_return}",
    ]
    if plan.resume_from:
        lines.append(f"resume from: {plan.resume_from}")
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`r2d2-train`: see the module docstring. Returns the exit status (a bad argument
    ends with status 2 and a message naming it, before any process starts)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
    )
    for name in ("checkpoint_interval", "keep_checkpoints"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: at least 1")
    try:
        plan = plan_run(args)
    except UsageError as exc:
        parser.error(str(exc))
    print(_describe(plan), flush=True)
    if args.dry_run:
        return 0
    try:
        manager, run_log = open_manager(plan)
    except (TypeError, ValueError, ImportError) as exc:
        parser.error(str(exc))
    try:
        summary = run(plan, manager, run_log)
    except CheckpointError as exc:  # raised before any child starts (a damaged replay)
        parser.error(str(exc))
    print(f"result: {os.path.join(plan.run_dir, RESULT_FILE)}")
    print(f"learning curve: {os.path.join(plan.run_dir, 'learning_curve.png')}")
    print(f"TensorBoard: tensorboard --logdir {os.path.join(plan.run_dir, 'tensorboard')}")
    print(
        f"continue with: {_resume_command(argv, plan.run_dir)}  (raise --nb-steps: it counts "
        "the checkpoint's env steps)"
    )
    return _EXIT_CODES.get(summary["stop_reason"], 0)


if __name__ == "__main__":
    sys.exit(main())
