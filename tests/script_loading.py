"""Benchmarks and examples are scripts, not packages: the tests load them by path."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_script(relative_path: str, name: str) -> ModuleType:
    """The module of the script at `relative_path` (from the repository root), run once
    under `name` (its top level only: scripts keep their work under `__main__`)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
