"""Calling `R2D2Callback` hooks on duck-typed callbacks, in any process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["call_hooks"]


def call_hooks(callbacks: Sequence[Any], name: str, *args: Any) -> None:
    """Calls hook `name` with `args` on every callback that has it.

    Callbacks need not subclass `R2D2Callback` (which imports TensorFlow through
    keras-rl): any object with the hook's method works, so actor processes that act with
    the numpy policy never load TensorFlow.
    """
    for callback in callbacks:
        hook = getattr(callback, name, None)
        if hook is not None:
            hook(*args)
