"""The first thing every multiprocessing child runs: prepare the process, run its main,
report.

`run_child` is every child's process target. It leaves the stop signals to the parent:
SIGINT is ignored, and SIGTERM and SIGHUP are ignored while the manager lives (a
scheduler's SIGTERM to the whole process group must not kill a child before the learner's
final checkpoint: the parent stops the children through the stop flag), then unblocks them
(the parent starts children with them blocked). It prepares the process
(`r2d2_agent.distributed.process_setup`: GPU hiding and memory growth before any
TensorFlow import, logging, seeds), and sends any exception's traceback to the parent
(`ChildFailed`) before exiting with code 1.

A child whose manager died (it was re-parented) stops: `ParentWatch` notices it between
steps, a SIGTERM or SIGHUP then ends it, and whatever fails because the manager's pipes
are gone ends it with one log line ("the manager process ... is gone"), not a traceback.
Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from r2d2_agent.distributed.messages import ChildFailed, KeepAliveLiveness
from r2d2_agent.distributed.mp.shared_state import Heartbeats, SharedFlag
from r2d2_agent.distributed.process_setup import ChildSetup, Deferred, prepare_process

__all__ = [
    "CHILD_IGNORED_SIGNALS",
    "ChildSetup",
    "Deferred",
    "ManagerGone",
    "ParentWatch",
    "Pulse",
    "bootstrap",
    "run_child",
]

logger = logging.getLogger(__name__)

CHILD_IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals a child leaves to its parent (`spawn_child` starts children with them blocked)."""

_REPARENTING_WAIT_S = 1.0
"""How long a child whose pipe to the manager broke waits to see itself re-parented (the
kernel closes a dying process's files a moment before it re-parents its children)."""

_gone_reported = False


class ManagerGone(RuntimeError):
    """The manager process that started this child is gone."""


def _report_manager_gone(parent: int) -> None:
    """Logs, once per process, that the manager died and this process stops."""
    global _gone_reported
    if not _gone_reported:
        _gone_reported = True
        logger.warning("the manager process (pid %d) is gone; this process stops", parent)


def _manager_is_gone(parent: int, exc: BaseException) -> bool:
    """Whether `exc` ended this child because its manager (pid `parent`) died."""
    if isinstance(exc, ManagerGone) or os.getppid() != parent:
        return True
    if not isinstance(exc, (OSError, EOFError)):
        return False
    deadline = time.monotonic() + _REPARENTING_WAIT_S  # a broken pipe: was it the manager?
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if os.getppid() != parent:
            return True
    return False


def _stop_signal_handler(parent: int) -> Callable[[int, Any], None]:
    """SIGTERM/SIGHUP in a child: ignored while the manager lives (it stops the run and
    this child with it), `ManagerGone` once it died."""

    def handler(signum: int, frame: Any) -> None:
        if os.getppid() == parent:
            logger.debug("%s ignored: the manager stops the run", signal.Signals(signum).name)
            return
        raise ManagerGone(f"{signal.Signals(signum).name} received; the manager is gone")

    return handler


def bootstrap(setup: ChildSetup, parent: int | None = None) -> None:
    """Ignores SIGINT, and SIGTERM and SIGHUP while the manager lives (the parent
    orchestrates shutdown), unblocks them (`spawn_child` starts children with them
    blocked), then `prepare_process(setup)`.

    Args:
        setup: How the process prepares itself.
        parent: The manager's process id (default: this process's parent).
    """
    parent = os.getppid() if parent is None else parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_signal_handler(parent))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(CHILD_IGNORED_SIGNALS))
    prepare_process(setup)


class Pulse(KeepAliveLiveness):
    """A child's `Liveness` for the parent's stall watchdog: beats in its `Heartbeats` slot.

    `beat()` counts one sign of life. Inside `busy(what)` the slot is marked busy and the
    keep-alive thread beats every `interval` seconds (see `KeepAliveLiveness`).

    Args:
        heartbeats: The run's heartbeats.
        slot: This child's slot.
        interval: Seconds between the keep-alive thread's beats.
    """

    def __init__(self, heartbeats: Heartbeats, slot: int, interval: float = 0.5) -> None:
        super().__init__(interval)
        self._heartbeats = heartbeats
        self._slot = slot

    def beat(self) -> None:
        self._heartbeats.beat(self._slot)

    def set_busy(self, busy: bool) -> None:
        self._heartbeats.set_busy(self._slot, busy)


def run_child(
    main: Callable[..., None],
    setup: ChildSetup,
    events: Connection,
    pulse: Pulse | None,
    *args: Any,
) -> None:
    """Process target: `bootstrap`, then `main(events, *args)` (with `pulse=pulse` when a
    pulse is given); errors go to `events`.

    The start-up (bootstrap: TensorFlow's import) counts as busy for the stall watchdog.
    If the manager died, the child exits with code 0 after one log line instead.
    """
    parent = os.getppid()
    try:
        if pulse is None:
            bootstrap(setup, parent)
            main(events, *args)
        else:
            pulse.beat()  # the first sign of life: the child's own code started
            with pulse.busy("start-up"):
                bootstrap(setup, parent)
            main(events, *args, pulse=pulse)
    except BaseException as exc:
        if _manager_is_gone(parent, exc):
            _report_manager_gone(parent)
            raise SystemExit(0) from None
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
            _report_manager_gone(self._ppid)
            self._stop.set()  # only this process's view matters: the manager is gone
        return self._stop.is_set()
