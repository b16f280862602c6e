"""The package's layering: dependencies point one way, and the lower layers stay free of
TensorFlow so that the manager's parent and numpy actors never load it.

Layers, bottom to top (a module may import its own subpackage and any lower layer):

    0  config, compat          the configuration; TensorFlow/keras-rl glue;
       leftovers               owner-tagged names of temporary files and segments
    1  math, presets           pure functions; tested configurations
    2  image_models            the ImageModel plug-in
    3  networks, replay, envs  Keras/numpy networks; sequence replay; env checks/adapter;
       checkpoints, runlog     checkpoint files (h5py); run-directory log files
    4  roles, plot             actor, learner, builder, episode loop; the learning-curve plot
    5  keras_rl, callbacks     the keras-rl face
    6  distributed             the manager and its backends
    7  testing, cli            test utilities (masked CartPole, benchmark protocol);
                               the `r2d2-train` command
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "r2d2_agent"

LAYERS = {
    "config": 0,
    "compat": 0,
    "leftovers": 0,
    "math": 1,
    "presets": 1,
    "image_models": 2,
    "networks": 3,
    "replay": 3,
    "envs": 3,
    "checkpoints": 3,
    "runlog": 3,
    "roles": 4,
    "plot": 4,
    "keras_rl": 5,
    "callbacks": 5,
    "distributed": 6,
    "testing": 7,
    "cli": 7,
}


def _unit(module_path: pathlib.Path) -> str:
    """The subpackage (or top-level module) a file belongs to, e.g. "roles"."""
    return module_path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_units(module_path: pathlib.Path) -> set[str]:
    """Subpackages of r2d2_agent that a file imports, at any depth of its code."""
    tree = ast.parse(module_path.read_text(), filename=str(module_path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "r2d2_agent":  # `from r2d2_agent import math`
                names.update(f"r2d2_agent.{alias.name}" for alias in node.names)
    units = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "r2d2_agent" and len(parts) > 1 and parts[1] in LAYERS:
            units.add(parts[1])
    return units


def _library_files() -> list[pathlib.Path]:
    """Every module but the public facade (`r2d2_agent/__init__.py`, which re-exports from
    every layer)."""
    facade = {PACKAGE / "__init__.py"}
    return [f for f in sorted(PACKAGE.rglob("*.py")) if f not in facade]


def test_every_subpackage_has_a_layer():
    units = {_unit(f) for f in _library_files()}
    assert units <= set(LAYERS), f"give these a layer: {sorted(units - set(LAYERS))}"


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_to_lower_layers_only(path):
    unit = _unit(path)
    upward = {
        target
        for target in _imported_units(path)
        if target != unit and LAYERS[target] >= LAYERS[unit]
    }
    assert not upward, f"{path.relative_to(PACKAGE)} (layer {LAYERS[unit]}) imports {upward}"


@pytest.mark.parametrize("name", ["compat.py", "config.py"])
def test_the_compat_module_and_the_config_import_nothing_of_the_package(name):
    assert _imported_units(PACKAGE / name) == set(), name


@pytest.mark.parametrize(
    "module",
    [
        "r2d2_agent",
        "r2d2_agent.math",
        "r2d2_agent.networks",
        "r2d2_agent.replay",
        "r2d2_agent.envs",
        "r2d2_agent.roles",
        "r2d2_agent.checkpoints",
        "r2d2_agent.runlog",
        "r2d2_agent.plot",
        "r2d2_agent.callbacks",
        "r2d2_agent.distributed",
        "r2d2_agent.distributed.mp.entrypoints",
        "r2d2_agent.distributed.ray_backend.supervisor",
        "r2d2_agent.testing",
        "r2d2_agent.presets",
        "r2d2_agent.cli",
        "r2d2_agent.leftovers",
    ],
)
def test_module_imports_without_tensorflow(module):
    code = f"import sys, {module}; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False", f"importing {module} loaded TensorFlow"


def test_the_manager_imports_without_ray():
    code = "import sys, r2d2_agent, r2d2_agent.distributed; print('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False", "importing the manager loaded Ray"


def _module_name(path: pathlib.Path) -> str:
    """`r2d2_agent/checkpoints/state.py` -> "r2d2_agent.checkpoints.state"."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package's modules that a file imports, at any depth of its code (deferred
    imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named = {f"{node.module}.{alias.name}" for alias in node.names}
            found.update(name for name in {node.module, *named} if name in modules)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
    return found


def test_no_two_modules_import_each_other_even_through_others():
    """The module graph is acyclic (the packages' `__init__` re-exports aside): a cycle,
    even one hidden in a deferred import, means two modules are one."""
    files = {_module_name(f): f for f in PACKAGE.rglob("*.py") if f.name != "__init__.py"}
    graph = {name: _imported_modules(f, set(files)) for name, f in files.items()}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in visiting:
            cycle = [*visiting[visiting.index(name) :], name]
            pytest.fail("modules import each other: " + " -> ".join(cycle))
        if name in done:
            return
        visiting.append(name)
        for target in sorted(graph[name]):
            visit(target)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
