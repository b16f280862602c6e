"""How every actor or learner process prepares itself, whatever backend started it.

`prepare_process` sets `TF_FORCE_GPU_ALLOW_GROWTH` and, for CPU-only roles,
`CUDA_VISIBLE_DEVICES=-1` before any TensorFlow import, quiets TensorFlow's native logs
unless asked, configures logging, seeds, and imports TensorFlow only when the role needs it
(then enables GPU memory growth before its first op). `Deferred` carries start arguments
that hold user objects past the backend's own unpickling, so they load after that.
Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

__all__ = ["ChildSetup", "Deferred", "prepare_process"]

_VERBOSE_ENV = "R2D2_TF_VERBOSE"  # r2d2_agent.compat.VERBOSE_ENV (compat imports TensorFlow)

T = TypeVar("T")


class Deferred(Generic[T]):
    """A value pickled now and unpickled by `load()` in the child, after its setup.

    A backend unpickles a process's arguments before its code runs (the `spawn` start
    method, a Ray actor's constructor), and unpickling user objects (callbacks, image
    models) can import TensorFlow. TensorFlow must come after the process set its
    environment (GPU hiding, memory growth, log level), so start arguments that hold user
    objects travel deferred.

    Args:
        value: The value to carry; it must be picklable.
        dumps: The pickler; e.g. `cloudpickle.dumps` where the receiving process cannot
            import the sender's `__main__` (a Ray worker), so functions and classes
            defined there travel by value. Its output loads with `pickle.loads`.
    """

    def __init__(self, value: T, dumps: Callable[..., bytes] = pickle.dumps) -> None:
        self._payload = dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def load(self) -> T:
        """Unpickles the value (in the receiving process)."""
        return pickle.loads(self._payload)


@dataclass(frozen=True)
class ChildSetup:
    """How a child process prepares itself before its role's code runs.

    Attributes:
        role: "learner" or "actor".
        index: Actor index (None for the learner).
        use_tensorflow: Import TensorFlow (and enable GPU memory growth) up front.
        hide_gpu: Set `CUDA_VISIBLE_DEVICES=-1` so the child never touches a GPU.
        seed: Seeds Python's, numpy's (and TensorFlow's) global generators.
        log_level: Level of the child's root logger, if it has no handler yet.
        tf_verbose: Show TensorFlow's native start-up logs (True), hide them (False), or
            follow the inherited `R2D2_TF_VERBOSE` (None).
    """

    role: str
    index: int | None = None
    use_tensorflow: bool = False
    hide_gpu: bool = False
    seed: int | None = None
    log_level: int = logging.WARNING
    tf_verbose: bool | None = None


def prepare_process(setup: ChildSetup) -> None:
    """Prepares this process as `setup` describes (see the module docstring)."""
    if setup.tf_verbose is not None:
        os.environ[_VERBOSE_ENV] = "1" if setup.tf_verbose else "0"
    if os.environ.get(_VERBOSE_ENV, "0").strip().lower() in ("", "0", "false", "no"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # compat hides the rest
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # covers late TF imports
    if setup.hide_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=setup.log_level,
            format="%(asctime)s %(processName)s %(levelname)s %(name)s: %(message)s",
        )
    if setup.seed is not None:
        random.seed(setup.seed)
        np.random.seed(setup.seed % 2**32)
    if setup.use_tensorflow:
        from r2d2_agent import compat

        compat.enable_gpu_memory_growth()
        if setup.seed is not None:
            compat.set_global_seed(setup.seed)
