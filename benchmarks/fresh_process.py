"""Runs one benchmark function in a fresh Python process (shared by the benchmarks).

A fresh spawned process starts as a user's `python script.py` does: the interpreter, the
imports and TensorFlow's import count, as they do for the manager's child processes.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["in_fresh_process"]


def in_fresh_process(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in a new spawned process; returns its (picklable) result.

    Raises:
        RuntimeError: With the child's traceback, if `fn` raised there.
    """
    context = multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    process = context.Process(target=_main, args=(results, fn, args, kwargs))
    process.start()
    ok, value = results.get()
    process.join()
    if not ok:
        raise RuntimeError(f"{fn.__name__}{args} failed in its process:\n{value}")
    return value


def _main(results: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    try:
        results.put((True, fn(*args, **kwargs)))
    except BaseException:
        results.put((False, traceback.format_exc()))
        raise
