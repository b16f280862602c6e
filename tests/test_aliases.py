"""The flat module paths of 0.1 still import, with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib
import sys

import pytest

from r2d2_agent._aliases import ALIASES


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_path_imports_with_a_deprecation_warning_naming_the_new_one(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=ALIASES[old].replace(".", r"\.")):
        module = importlib.import_module(old)
    new = importlib.import_module(ALIASES[old])
    for name in getattr(new, "__all__", ()):
        assert getattr(module, name) is getattr(new, name)


def test_old_manager_path_gives_the_manager_and_its_result_types():
    sys.modules.pop("r2d2_agent.manager", None)
    with pytest.warns(DeprecationWarning):
        from r2d2_agent.manager import R2D2Manager, R2D2ProcessError, TrainResult
    from r2d2_agent import R2D2Manager as new_manager

    assert R2D2Manager is new_manager
    assert issubclass(R2D2ProcessError, RuntimeError) and TrainResult is not None


def test_an_unknown_old_path_still_fails():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("r2d2_agent.no_such_module")
