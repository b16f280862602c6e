"""The parent's side of each child process: start it, stop it, report how it failed.

`spawn_child` starts a `run_child` process with the stop signals (SIGINT, SIGTERM, SIGHUP)
blocked from its first line, so a terminal's Ctrl-C or a scheduler's SIGTERM (sent to the
whole process group) leaves shutdown to the parent;
`terminate` joins a process, killing it if it lingers; `child_error`
turns a child's exit code and traceback into the `R2D2ProcessError` the run raises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from r2d2_agent.distributed.messages import ActorSummary, LearnerSummary
from r2d2_agent.distributed.mp.bootstrap import (
    CHILD_IGNORED_SIGNALS,
    ChildSetup,
    Pulse,
    run_child,
)
from r2d2_agent.distributed.reports import R2D2ProcessError, describe_exit

__all__ = ["ChildProcess", "child_error", "signals_deferred", "spawn_child", "terminate"]


class ChildProcess:
    """A child process and the read end of its event pipe.

    Attributes:
        role: "learner" or "actor".
        index: The actor index (None for the learner).
        process: The multiprocessing process.
        events: Read end of the pipe on which the child sends its events.
        error: The traceback the child sent, if any.
        summary: What the child reported when it stopped normally.
        exited: Whether the parent has seen the child exit.
        beats: The child's heartbeat count when the parent last saw it change.
        last_sign_of_life: `time.monotonic()` when the parent last saw it change (or
            started the child).
        stalled_for: Seconds the child had been silent when the watchdog killed it
            (None: not killed as stalled).
        steps_at_start: An actor's env-step count when it (re)started.
    """

    def __init__(self, role: str, index: int | None, process: Any, events: Connection) -> None:
        self.role = role
        self.index = index
        self.process = process
        self.events = events
        self.error: str | None = None
        self.summary: ActorSummary | LearnerSummary | None = None
        self.exited = False
        self.beats = 0
        self.last_sign_of_life = time.monotonic()
        self.stalled_for: float | None = None
        self.steps_at_start = 0

    @property
    def name(self) -> str:
        """ "learner" or "actor <index>"."""
        return self.role if self.index is None else f"{self.role} {self.index}"


def spawn_child(
    ctx: BaseContext,
    role: str,
    index: int | None,
    setup: ChildSetup,
    main: Callable[..., None],
    *args: Any,
    pulse: Pulse | None = None,
) -> ChildProcess:
    """Starts `run_child(main, setup, events, pulse, *args)` in a new process.

    Args:
        ctx: The multiprocessing context.
        role: "learner" or "actor".
        index: The actor index (None for the learner).
        setup: How the child prepares itself.
        main: The child's main function (`actor_main`, `learner_main`).
        *args: `main`'s arguments after the event pipe.
        pulse: The child's heartbeat (then `main` gets it as `pulse=`); None: no
            watchdog.

    Returns:
        The started child, holding the read end of its event pipe.
    """
    events_r, events_w = ctx.Pipe(duplex=False)
    name = "r2d2-learner" if index is None else f"r2d2-actor-{index}"
    process = ctx.Process(target=run_child, name=name, args=(main, setup, events_w, pulse, *args))
    try:
        with signals_deferred():  # the child starts with the stop signals blocked
            process.start()
    except BaseException:
        events_r.close()
        raise
    finally:
        events_w.close()
    return ChildProcess(role, index, process, events_r)


def child_error(
    child: ChildProcess,
    what: str,
    code: int | None,
    without_traceback: str = "no traceback: the process was killed or crashed hard",
) -> R2D2ProcessError:
    """The error to raise for `child`: `what`, its exit status and its traceback (or, if
    it sent none, `without_traceback`)."""
    if child.error:
        detail = f"\n--- traceback from the {child.name} process ---\n{child.error.rstrip()}"
    elif child.stalled_for is not None:
        detail = " (killed by the stall watchdog)"
    else:
        detail = f" ({without_traceback})"
    return R2D2ProcessError(
        f"{what} ({describe_exit(code)}){detail}", child.role, child.index, code, child.error
    )


def terminate(process: Any, grace: float = 2.0) -> None:
    """Joins a process, killing it (SIGKILL) if it has not exited within `grace` seconds.

    Not SIGTERM: children ignore it while their manager lives (see `bootstrap`), and a
    stopped (SIGSTOP) process would only exit on SIGKILL anyway.
    """
    if process.exitcode is None and grace > 0:
        process.join(grace)
    if process.exitcode is None:
        process.kill()
        process.join()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Holds back SIGINT in this process meanwhile, then delivers it, and blocks SIGTERM
    and SIGHUP in this thread (main thread only).

    Two things happen while a child starts. The calling thread blocks the stop signals
    (`CHILD_IGNORED_SIGNALS`), and a spawned child inherits that mask: a terminal's Ctrl-C
    or a scheduler's SIGTERM, sent to the whole process group, stays pending in the
    starting child until its `bootstrap` installs its own handlers and unblocks them, so
    it cannot kill the child before then. And a recording handler replaces the parent's
    own SIGINT handler: a Ctrl-C that reaches the parent now (through another thread, whose
    mask does not block it) is not raised in the middle of a child's start, and not lost
    either: the previous handler gets it (raising `KeyboardInterrupt`) when the window
    ends. A SIGTERM or SIGHUP meanwhile reaches the parent's handler (`train`'s, which only
    records a stop request) through another thread, or when the mask is restored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(CHILD_IGNORED_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(signal.SIGINT, previous_handler)
        if received:
            if callable(previous_handler):
                previous_handler(signal.SIGINT, None)
            elif previous_handler == signal.SIG_DFL:
                raise KeyboardInterrupt
