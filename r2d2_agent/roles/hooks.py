"""Calling `R2D2Callback` hooks on duck-typed callbacks, in any process, and binding the
way a callback ends the run (`R2D2Callback.request_stop`).

Used by the single-process agent's `fit`/`test` and by the distributed loops and backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["bind_stop_requester", "call_hooks"]


def call_hooks(callbacks: Sequence[Any], name: str, *args: Any) -> None:
    """Calls hook `name` with `args` on every callback that has it.

    Callbacks need not subclass `R2D2Callback`: any object with the hook's method works.
    """
    for callback in callbacks:
        hook = getattr(callback, name, None)
        if hook is not None:
            hook(*args)


def bind_stop_requester(callbacks: Sequence[Any], requester: Any) -> None:
    """Gives every callback that can request a stop (`R2D2Callback.request_stop`: any
    object with `set_stop_requester`) this process's way to end the run; None unbinds.

    Args:
        callbacks: The callbacks of this process.
        requester: `requester(reason)` asks the run to stop (in a child: a
            `StopRequested` event to the parent).
    """
    for callback in callbacks:
        bind = getattr(callback, "set_stop_requester", None)
        if bind is not None:
            bind(requester)
