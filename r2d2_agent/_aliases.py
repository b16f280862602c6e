"""Deprecated import paths of the flat layout before 0.2 (e.g. `r2d2_agent.manager`).

Importing one of them gives a small module that forwards to its new home and warns with a
`DeprecationWarning` naming it. Removed in a later release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

__all__ = ["ALIASES", "install"]

ALIASES = {
    "r2d2_agent.agent": "r2d2_agent.keras_rl",
    "r2d2_agent.manager": "r2d2_agent.distributed",
    "r2d2_agent.children": "r2d2_agent.distributed",
    "r2d2_agent.reports": "r2d2_agent.distributed",
    "r2d2_agent.targets": "r2d2_agent.math",
    "r2d2_agent.losses": "r2d2_agent.math.tf_ops",
    "r2d2_agent.learner": "r2d2_agent.roles.learner",
    "r2d2_agent.actor": "r2d2_agent.roles.actor",
    "r2d2_agent.numpy_net": "r2d2_agent.networks.numpy_net",
    "r2d2_agent.env_checks": "r2d2_agent.envs.checks",
    "r2d2_agent.transport": "r2d2_agent.distributed.interfaces",
    "r2d2_agent.weights": "r2d2_agent.distributed.mp.shared_weights",
}
"""Old module -> the module that now holds its public names."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(
            f"{module.__name__} is deprecated; import from {self._target} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        target = importlib.import_module(self._target)

        def __getattr__(name: str) -> Any:
            return getattr(target, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__all__ = list(getattr(target, "__all__", ()))


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in ALIASES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ALIASES[fullname]))


def install() -> None:
    """Adds the alias finder to `sys.meta_path` (once)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
