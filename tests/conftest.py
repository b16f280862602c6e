# ruff: noqa: E402  (the imports below come after r2d2_agent.compat's on purpose)
"""Shared test setup: quiet TensorFlow and legacy-Keras mode before any TensorFlow import.

`r2d2_agent.compat` sets `TF_USE_LEGACY_KERAS=1` before TensorFlow is first imported, so it
is imported here, ahead of every test module, so that any TensorFlow import in the tests
resolves `tensorflow.keras` to tf-keras (Keras 2), which keras-rl2 needs.

Fixtures shared by the test modules:

- `make_config`: builds a tiny CartPole-shaped `R2D2Config` (`TINY_CARTPOLE`) with overrides.
- `make_cartpole` and `cartpole`: gymnasium CartPole-v1 envs, closed after the test.
- `shm_segments`, `assert_no_leftovers` and `no_leftovers`: the "nothing left behind"
  check of the multiprocessing tests (no child process, no shared-memory segment).

The session's local Ray clusters keep their session folders (logs, sockets) under a temp
root of the test session (`RAY_TMPDIR`), removed at its end, not in `/tmp/ray`.

`make test` runs the suite on two pytest-xdist workers (`pytest -n 2`), scheduled here by
`pytest_xdist_make_scheduler`: the tests of a module stay on one worker (its
module-scoped fixtures run once), and every test that starts or joins a Ray runs on one
worker, one after the other (`ray start` takes Ray's default port, and a joining test
must find the one cluster it started). The longest work units (`SLOW_UNITS`) are handed
out first, so that short modules, not one long module alone, fill the end of the run.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import r2d2_agent.compat  # noqa: E402,F401  (must come before any other TensorFlow import)

# isort: split
import multiprocessing
import pathlib
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

from r2d2_agent.config import R2D2Config

TINY_CARTPOLE: dict[str, Any] = {
    "input_shape": (4,),  # CartPole-v1's observation: 4 values
    "nb_actions": 2,  # CartPole-v1's actions: push left, push right
    "lstm_units": 8,
    "dense_units": 8,
    "burnin": 2,
    "input_length": 4,
    "multisteps": 2,
    "batch_size": 4,
    "memory_capacity": 64,
    "seed": 0,
}
"""The base of `make_config`: a CartPole-shaped R2D2 small enough to build and train in
milliseconds (8 LSTM and 8 dense units; sequences of 2 burn-in + 4 trained + 2 look-ahead
steps; batches of 4 sequences out of a replay of 64; seed 0). Every other field keeps its
`R2D2Config` default."""


@pytest.fixture(scope="session")
def make_config() -> Callable[..., R2D2Config]:
    """Factory: `make_config(**overrides)` is `R2D2Config(**(TINY_CARTPOLE | overrides))`.

    Session-scoped (it holds no state), so module-scoped fixtures can use it too.
    """

    def factory(**overrides: Any) -> R2D2Config:
        return R2D2Config(**(TINY_CARTPOLE | overrides))

    return factory


@pytest.fixture
def make_cartpole() -> Iterator[Callable[..., gym.Env]]:
    """Factory: `make_cartpole(**kwargs)` is `gym.make("CartPole-v1", **kwargs)`; every env
    it made is closed after the test."""
    envs: list[gym.Env] = []

    def factory(**kwargs: Any) -> gym.Env:
        env = gym.make("CartPole-v1", **kwargs)
        envs.append(env)
        return env

    yield factory
    for env in envs:
        env.close()


@pytest.fixture
def cartpole(make_cartpole) -> gym.Env:
    """A raw gymnasium CartPole-v1 env, closed after the test."""
    return make_cartpole()


# Shared-memory segments of the package are named <prefix>_<pid>_<start>_<scope>_<hex> on Linux
# (<prefix>_<pid>_<hex> elsewhere; r2d2_agent.leftovers): the manager's use the prefix "r2d2",
# those that the transport tests create "r2d2t".
_SEGMENT = re.compile(r"r2d2t?_(\d+)_")


def _segments_of(pid: int) -> list[str]:
    if not os.path.isdir("/dev/shm"):
        return []
    return sorted(
        name
        for name in os.listdir("/dev/shm")
        if (match := _SEGMENT.match(name)) and int(match.group(1)) == pid
    )


def _check_no_leftovers() -> None:
    assert multiprocessing.active_children() == [], "a child process is still alive"
    assert _segments_of(os.getpid()) == [], "a shared-memory segment is left behind"


@pytest.fixture(scope="session")
def shm_segments() -> Callable[..., list[str]]:
    """`shm_segments(pid=None)`: the package's /dev/shm segments made by process `pid` (this
    process by default); always empty where there is no /dev/shm."""

    def segments(pid: int | None = None) -> list[str]:
        return _segments_of(os.getpid() if pid is None else pid)

    return segments


@pytest.fixture(scope="session")
def assert_no_leftovers() -> Callable[[], None]:
    """`assert_no_leftovers()` fails if a child process (`multiprocessing.active_children`) or
    a shared-memory segment of this process is left. For fixtures of any scope."""
    return _check_no_leftovers


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """After the test: no child process and no shared-memory segment of this process left.

    Not garbage-collected first: a segment that only a garbage collection would release
    counts as left behind.
    """
    yield
    _check_no_leftovers()


RAY_MODULES = frozenset({"test_ray_backend.py", "test_ray_join.py"})
"""Test modules whose every test starts or joins a Ray."""

RAY_TESTS = frozenset(
    {
        "tests/test_readme.py::test_readme_blocks_run[ray]",
        "tests/test_examples.py::test_the_cartpole_example_trains_on_ray",
    }
)
"""Single tests of other modules that start a Ray."""


SLOW_UNITS = (
    "ray",
    "tests/test_readme.py",
    "tests/test_learning.py",
    "tests/test_manager.py",
    "tests/test_examples.py",
    "tests/test_learner.py",
    "tests/test_reward_normalization.py",
    "tests/test_resume.py",
    "tests/test_cli.py",
    "tests/test_leftovers.py",
)
"""The work units that take longest, longest first. Seconds per module on one worker
(stop 47's `--durations=120`, 24 min in all): test_ray_backend and test_ray_join 198
(the Ray group also takes one README block and one example), test_readme 204,
test_learning 160, test_manager 155, test_examples 138, the rest here 29-56 each; every
other module under 25."""


def slow_units_first(units: list[str]) -> list[str]:
    """`units` with those of `SLOW_UNITS` first, in its order; the others after, as given."""
    rank = {unit: i for i, unit in enumerate(SLOW_UNITS)}
    return sorted(units, key=lambda unit: rank.get(unit, len(SLOW_UNITS)))


def xdist_scope_of(nodeid: str) -> str:
    """The pytest-xdist work unit of a test: "ray" for the tests that start a Ray,
    otherwise its module's path."""
    path = nodeid.split("::", 1)[0]
    if pathlib.PurePath(path).name in RAY_MODULES or nodeid in RAY_TESTS:
        return "ray"
    return path


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook; without pytest-xdist unused
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Sends each work unit of `xdist_scope_of` whole to one worker, `SLOW_UNITS` first."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrRayScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the queue is complete at the first assignment
                order = slow_units_first(list(self.workqueue))
                self.workqueue = OrderedDict((unit, self.workqueue[unit]) for unit in order)
                self._ordered = True
            super()._assign_work_unit(node)

    return ModuleOrRayScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def ray_temp_root() -> Iterator[str]:
    """A temp root for the session's Ray clusters (`RAY_TMPDIR`), removed at the end.

    Short and under /tmp: Ray's socket paths under it must stay within the 107 bytes a
    Unix socket path may have.
    """
    root = tempfile.mkdtemp(prefix="r2d2ray", dir="/tmp")
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = root
    try:
        yield root
    finally:
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        shutil.rmtree(root, ignore_errors=True)
