"""How `make test` spreads the suite over two pytest-xdist workers (tests/conftest.py): a
module's tests stay on one worker, and every test that starts a Ray runs on one worker."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import RAY_MODULES, RAY_TESTS, SLOW_UNITS, slow_units_first, xdist_scope_of

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/test_config.py::test_a[x-1]", "tests/test_config.py"),
        ("tests/test_ray_backend.py::test_b", "ray"),
        ("tests/test_ray_join.py::test_c", "ray"),
        ("tests/test_readme.py::test_readme_blocks_run[ray]", "ray"),
        ("tests/test_readme.py::test_readme_blocks_run[agent]", "tests/test_readme.py"),
        ("tests/test_examples.py::test_the_cartpole_example_trains_on_ray", "ray"),
    ],
)
def test_a_test_goes_with_its_module_or_with_the_ray_tests(nodeid, scope):
    assert xdist_scope_of(nodeid) == scope


def test_the_ray_tests_named_outside_the_ray_modules_exist():
    """A renamed Ray test would silently leave the Ray group: the names must collect."""
    files = sorted({nodeid.split("::")[0] for nodeid in RAY_TESTS})
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert sorted(RAY_TESTS - set(collected)) == []
    assert all((ROOT / "tests" / name).is_file() for name in RAY_MODULES)


_USES_RAY = re.compile(r"""importorskip\(["']ray["']\)|^import ray|backend=["']ray["']""", re.M)


def test_every_module_that_uses_ray_has_its_ray_tests_named():
    """A new module that starts a Ray must join the Ray group (conftest's `RAY_MODULES` or
    `RAY_TESTS`), or it could run beside another Ray."""
    using = {
        path.name
        for path in (ROOT / "tests").glob("test_*.py")
        if _USES_RAY.search(path.read_text())
    }
    named = RAY_MODULES | {pathlib.PurePath(n.split("::")[0]).name for n in RAY_TESTS}
    assert sorted(using - named) == []
    assert {"test_examples.py", "test_readme.py", "test_ray_backend.py"} <= using  # it sees


_RECORDING_TESTS = textwrap.dedent("""
    import os
    import pytest

    def record(kind):
        with open(os.environ["RECORD"], "a") as f:
            f.write(kind + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")

    @pytest.mark.parametrize("i", range({count}))
    def test_{name}(i):
        record("{module}")
""")


def test_the_slow_units_go_first_in_their_order_and_the_rest_keep_theirs():
    units = ["tests/test_a.py", "tests/test_learning.py", "tests/test_b.py", "ray"]
    assert slow_units_first(units) == [
        "ray",
        "tests/test_learning.py",
        "tests/test_a.py",
        "tests/test_b.py",
    ]


def test_the_slow_units_exist():
    """A renamed module would silently lose its place at the front."""
    assert SLOW_UNITS[0] == "ray"
    assert [unit for unit in SLOW_UNITS[1:] if not (ROOT / unit).is_file()] == []


def test_two_workers_keep_modules_and_the_ray_tests_together(tmp_path):
    """A real two-worker session over stand-in modules: each module's tests on one worker,
    the Ray modules' and the single Ray tests' on one, and the slow units (the Ray group
    and the examples) first, though a plain module has more tests than either."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")
    modules = {"test_a.py": "a", "test_b.py": "b", **{m: "ray" for m in RAY_MODULES}}
    for i, (module, kind) in enumerate(modules.items()):
        count = 30 if kind == "a" else 6  # by test count xdist would hand out "a" first
        (tests / module).write_text(_RECORDING_TESTS.format(name=f"t{i}", module=kind, count=count))
    (tests / "test_examples.py").write_text(
        _RECORDING_TESTS.format(name="other", module="examples", count=6)
        + "\ndef test_the_cartpole_example_trains_on_ray():\n    record('ray')\n"
    )
    record = tmp_path / "record.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env={**os.environ, "RECORD": str(record)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    first: dict[str, str] = {}  # each worker's first module
    for line in record.read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
        first.setdefault(worker, module)
    assert {m: len(w) for m, w in workers.items()} == {"a": 1, "b": 1, "ray": 1, "examples": 1}
    assert len(set().union(*workers.values())) == 2  # both workers had work
    assert sorted(first.values()) == ["examples", "ray"]
