"""The first thing every multiprocessing child runs: prepare the process, run its main,
report.

`run_child` is every child's process target. It ignores SIGINT (the parent orchestrates
shutdown) and unblocks it (the parent starts children with SIGINT blocked), prepares the
process (`r2d2_agent.distributed.process_setup`: GPU hiding and memory growth before any
TensorFlow import, logging, seeds), and sends any exception's traceback to the parent
(`ChildFailed`) before exiting with code 1.
Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import logging
import os
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from r2d2_agent.distributed.messages import ChildFailed
from r2d2_agent.distributed.mp.shared_state import SharedFlag
from r2d2_agent.distributed.process_setup import ChildSetup, Deferred, prepare_process

__all__ = ["ChildSetup", "Deferred", "ParentWatch", "bootstrap", "run_child"]

logger = logging.getLogger(__name__)


def bootstrap(setup: ChildSetup) -> None:
    """Ignores SIGINT (the parent orchestrates shutdown), unblocks it (`spawn_child` starts
    children with SIGINT blocked), then `prepare_process(setup)`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    prepare_process(setup)


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
