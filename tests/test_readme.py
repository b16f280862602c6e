"""Every code block of the README runs, so the README cannot rot.

Each fenced block of README.md (python, bash, toml) is declared below, in `BLOCKS`: the
group it runs in, or why it does not run. The blocks of a group run in README order in a
fresh temporary directory: its Python blocks one after the other in one fresh interpreter
(sharing their names, as a reader's script would), then its bash blocks; a toml block is
written to the file its first line names. A block runs as it is written, but for the
budget substitutions declared next to it (`replace`: each must occur in the block, so a
changed README fails here rather than silently running something else). A traceback
names `README.md` and the block's line.

A new README block fails `test_every_readme_block_is_declared` until it is declared here.
The groups that train with the manager are `slow`; the single-process group is not.
The docstring examples of the public API run here too (doctest).
"""

from __future__ import annotations

import doctest
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README."""

    line: int  # the line of the opening fence
    lang: str
    text: str


@dataclass(frozen=True)
class Declared:
    """How one README block is run.

    Attributes:
        marker: Text that occurs in this block only (it names the block).
        group: The group it runs in; None: it does not run (see `skip`).
        replace: Budget substitutions (old, new), each applied to every occurrence.
        skip: Why the block does not run.
    """

    marker: str
    group: str | None = None
    replace: tuple[tuple[str, str], ...] = ()
    skip: str = ""


BLOCKS = [
    Declared("make demo", skip="builds a virtualenv; `make test` is this test suite"),
    Declared('pip install -e ".[test]"', skip="installs packages"),
    Declared(
        "history = agent.fit(",  # the quickstart, single process
        "agent",
        replace=(("nb_steps=30_000", "nb_steps=300"), ("nb_episodes=10", "nb_episodes=2")),
    ),
    Declared(
        'env_factory = functools.partial(gym.make, "CartPole-v1")',  # the quickstart, manager
        "manager",
        replace=(("nb_steps=30_000", "nb_steps=600"),),
    ),
    Declared(
        "from r2d2_agent.distributed.ray_backend import RayOptions",
        "ray",
        replace=(
            ("actor_num=16", "actor_num=2"),
            ('ray_address="auto"', "ray_address=None"),
            ("learner_num_gpus=1", "learner_num_gpus=0"),
            ("nb_steps=1_000_000", "nb_steps=300"),
        ),
    ),
    Declared("ray start --head", skip="starts a Ray cluster on several machines"),
    Declared("class SmallConv(ImageModel)", "agent"),
    Declared(
        "agent4.vector_epsilons",  # the single-process agent with N envs
        "agent",
        replace=(("nb_steps=30_000", "nb_steps=300"),),
    ),
    Declared(
        "r2d2-train CartPole-v1 --preset cartpole --actors 2",
        "cli",
        replace=(
            ("r2d2-train", "python -m r2d2_agent.cli"),  # the worktree is not installed
            ("--actors 2 --run-dir", "--actors 1 -q --nb-steps 300 --eval-episodes 1 --run-dir"),
            ("--nb-steps 200000 --resume", "-q --actors 1 --nb-steps 600 --resume"),
            ("--nb-steps 200000", "-q --actors 1 --nb-steps 300 --eval-episodes 1"),
            (
                "--actors 4 --max-seconds 3600",
                "--actors 1 -q --nb-steps 64 --eval-episodes 1 --set memory_warmup=2 "
                "--set memory_capacity=100",
            ),
        ),
    ),
    Declared("# pong.toml", "cli"),
    Declared(
        "class StopAtMeanReturn(R2D2Callback)",
        "manager",
        replace=(
            ("nb_steps=200_000", "nb_steps=600"),
            ("StopAtMeanReturn(475)", "StopAtMeanReturn(5)"),
        ),
    ),
    Declared(
        "class MyMetrics(R2D2Callback)",
        "manager",
        replace=(
            # A learner-update limit, not env steps: under load the actors can reach a
            # small env-step limit before the learner's first updates (CI once did).
            ("nb_steps=30_000", "nb_trains=20"),
            ("learner.updates % 100", "learner.updates % 5"),
        ),
    ),
    Declared("python -m r2d2_agent.plot runs/x --metric", "manager"),
    Declared(
        'CheckpointCallback("runs/x/checkpoints"',
        "manager",
        replace=(
            ("interval=1_000", "interval=5"),
            ("nb_steps=100_000", "nb_steps=300"),
            ("nb_steps=200_000", "nb_steps=600"),
            ("nb_steps=50_000", "nb_steps=100"),
        ),
    ),
    Declared(
        'run_log = RunLogCallback("runs/x", interval=100, plot=True)',
        "manager",
        replace=(("nb_steps=60_000", "nb_steps=600"), ("evaluate(10)", "evaluate(2)")),
    ),
    Declared(
        "python -m r2d2_agent.plot runs/x -o curve.png",
        "manager",
        replace=(("tensorboard --logdir", "tensorboard --inspect --logdir"),),  # no server
    ),
    Declared(
        "agent.backward(reward, terminated, truncated=truncated",  # a loop of your own
        "agent",
        replace=(("range(10_000)", "range(200)"),),
    ),
    Declared(
        'best_path="masked-best.h5", restore_best=True',  # EvaluationCallback
        "agent",
        replace=(
            ("interval=5_000, episodes=10", "interval=100, episodes=2"),
            ("nb_steps=60_000", "nb_steps=250"),
            ("nb_episodes=10", "nb_episodes=2"),
        ),
    ),
    Declared("PrioritizedSequenceReplay(1_000", "agent"),
    Declared(
        "agent.record_episodes(keep=80",  # the recurrent-state diagnostic
        "agent",
        replace=(("nb_steps=25_000", "nb_steps=300"),),
    ),
    Declared(
        'StateDiscrepancyCallback("runs/sd"',  # the diagnostic of a manager run
        "manager",
        replace=(
            ("actor_num=2", "actor_num=1"),
            ("nb_steps=50_000", "nb_steps=600"),
            ("interval=2_000", "interval=20"),
            ("every=3", "every=1"),
        ),
    ),
    Declared(
        "r2d2-leftovers --remove runs/x",
        "leftovers",
        replace=(("r2d2-leftovers", "python -m r2d2_agent.leftovers"),),
    ),
]

PREPARE = {"leftovers": ("runs/x",)}
"""Directories a group's commands expect (as the manager's blocks before them made them)."""

PRELUDE = {
    # The Ray block continues the manager's quickstart, which runs in another group.
    "ray": textwrap.dedent(
        """
        import functools, gymnasium as gym
        from r2d2_agent import R2D2Manager
        from r2d2_agent.presets import cartpole_config
        env_factory = functools.partial(gym.make, "CartPole-v1")
        """
    ),
}
"""Names a group's blocks take from blocks of another group, declared in full."""

SLOW = {"manager", "cli", "ray"}


def readme_blocks() -> list[Block]:
    """The README's fenced blocks in python, bash or toml."""
    blocks, lines = [], README.read_text().splitlines()
    fence = re.compile(r"^```(\w*)\s*$")
    i = 0
    while i < len(lines):
        match = fence.match(lines[i])
        if match:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if match.group(1) in ("python", "bash", "toml"):
                blocks.append(Block(i + 1, match.group(1), "\n".join(lines[i + 1 : end]) + "\n"))
            i = end
        i += 1
    return blocks


def _declared(block: Block) -> Declared:
    (found,) = [d for d in BLOCKS if d.marker in block.text]
    return found


def _prepared(block: Block, declared: Declared) -> str:
    text = block.text
    for old, new in declared.replace:
        assert old in text, f"README block at line {block.line} no longer holds {old!r}"
        text = text.replace(old, new)
    return text


RUNNER = textwrap.dedent(
    """
    # Runs README blocks at module level, as one script: the manager's blocks guard their
    # run with `if __name__ == "__main__"`, so spawned children (which import this file)
    # only see their definitions.
    import json
    with open("blocks.json") as file:  # children start in the same directory
        PRELUDE, BLOCKS = json.load(file)
    exec(PRELUDE)
    for line, source in BLOCKS:
        exec(compile("\\n" * line + source, "README.md", "exec"))
    """
)


def test_every_readme_block_is_declared():
    blocks = readme_blocks()
    for block in blocks:
        matching = [d.marker for d in BLOCKS if d.marker in block.text]
        assert len(matching) == 1, (
            f"README block at line {block.line} ({block.text.splitlines()[0]!r}) matches "
            f"{matching or 'no declaration'}: declare it in tests/test_readme.py BLOCKS"
        )
    used = {_declared(b).marker for b in blocks}
    assert [d.marker for d in BLOCKS if d.marker not in used] == []


def _group_params():
    groups = sorted({d.group for d in BLOCKS if d.group})
    return [pytest.param(g, marks=pytest.mark.slow) if g in SLOW else g for g in groups]


@pytest.mark.parametrize("group", _group_params())
def test_readme_blocks_run(group, tmp_path):
    if group == "ray":
        pytest.importorskip("ray")
    if group == "cli":
        pytest.importorskip("ale_py")
    blocks = [(b, _declared(b)) for b in readme_blocks()]
    mine = [(b, d) for b, d in blocks if d.group == group]
    for folder in PREPARE.get(group, ()):
        (tmp_path / folder).mkdir(parents=True)
    for block, declared in mine:  # files first: toml blocks are the files commands read
        if block.lang == "toml":
            name = block.text.splitlines()[0].removeprefix("#").strip()
            (tmp_path / name).write_text(_prepared(block, declared))
    python = [(b.line, _prepared(b, d)) for b, d in mine if b.lang == "python"]
    if python:
        (tmp_path / "blocks.json").write_text(json.dumps([PRELUDE.get(group, ""), python]))
        (tmp_path / "run_readme.py").write_text(RUNNER)
        _run([sys.executable, "run_readme.py"], tmp_path, f"README blocks of group {group!r}")
    for block, declared in mine:
        if block.lang == "bash":
            command = ["bash", "-euo", "pipefail", "-c", _prepared(block, declared)]
            _run(command, tmp_path, f"README bash block at line {block.line}")


def _run(command: list[str], folder: pathlib.Path, what: str) -> None:
    """Runs `command` in `folder` with this worktree's package; fails naming `what`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    done = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"{what} failed:\n{done.stderr[-6000:]}"


# ----------------------------------------------------------------- docstring examples --
DOCTESTED = [
    "r2d2_agent.config",
    "r2d2_agent.presets",
    "r2d2_agent.keras_rl.agent",
    "r2d2_agent.callbacks.base",
    "r2d2_agent.callbacks.evaluation",
    "r2d2_agent.runlog.reader",
    "r2d2_agent.envs.memory",
    "r2d2_agent.math.seeding",
]
"""Modules of the public API whose docstrings hold examples (`>>>`)."""


@pytest.mark.parametrize("name", DOCTESTED)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{name} has no docstring example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
