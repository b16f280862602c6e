"""The first thing every child process runs: prepare the process, run its main, report.

`run_child` is every child's process target. It ignores SIGINT (the parent orchestrates
shutdown) and unblocks it (the parent starts children with SIGINT blocked), sets
`TF_FORCE_GPU_ALLOW_GROWTH` and, for CPU-only children, `CUDA_VISIBLE_DEVICES=-1` before
any TensorFlow import, imports TensorFlow only when the child needs it (then enables GPU
memory growth before its first op), seeds, and sends any exception's traceback to the
parent (`ChildFailed`) before exiting with code 1.
Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

import numpy as np

from r2d2_agent.distributed.messages import ChildFailed
from r2d2_agent.distributed.mp.shared_state import SharedFlag

__all__ = ["ChildSetup", "Deferred", "ParentWatch", "bootstrap", "run_child"]

logger = logging.getLogger(__name__)

_VERBOSE_ENV = "R2D2_TF_VERBOSE"  # r2d2_agent.compat.VERBOSE_ENV (compat imports TensorFlow)

T = TypeVar("T")


class Deferred(Generic[T]):
    """A value pickled now and unpickled by `load()` in the child, after `bootstrap`.

    The `spawn` start method unpickles a process's arguments before its target runs, and
    unpickling user objects (callbacks, image models) can import TensorFlow. TensorFlow
    must come after the child set its environment (GPU hiding, memory growth, log level),
    so start arguments that hold user objects travel deferred.

    Args:
        value: The value to carry; it must be picklable.
    """

    def __init__(self, value: T) -> None:
        self._payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def load(self) -> T:
        """Unpickles the value (in the receiving process)."""
        return pickle.loads(self._payload)


@dataclass(frozen=True)
class ChildSetup:
    """How `run_child` prepares a child before its main function.

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


def bootstrap(setup: ChildSetup) -> None:
    """Prepares this process as `setup` describes (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent orchestrates shutdown
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by spawn_child
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


def run_child(main: Callable[..., None], setup: ChildSetup, events: Connection, *args: Any) -> None:
    """Process target: `bootstrap`, then `main(events, *args)`; errors go to `events`."""
    try:
        bootstrap(setup)
        main(events, *args)
    except BaseException:
        text = traceback.format_exc()
        logger.error("%s %s failed:\n%s", setup.role, setup.index, text)
        try:
            events.send(ChildFailed(text))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        events.close()


class ParentWatch:
    """True once the stop flag is raised or the manager died (this process was
    re-parented); the parent check runs every `every` calls, as it costs a system call.

    Args:
        stop: The run's stop flag.
        every: Calls between checks of the parent process id.
    """

    def __init__(self, stop: SharedFlag, every: int = 256) -> None:
        self._stop = stop
        self._ppid = os.getppid()
        self._every = every
        self._calls = 0

    def __call__(self) -> bool:
        self._calls += 1
        if self._calls % self._every == 0 and os.getppid() != self._ppid:
            logger.warning("the manager process is gone; stopping")
            self._stop.set()  # only this process's view matters: the manager is gone
        return self._stop.is_set()
