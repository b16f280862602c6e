"""The parent's side of each child process: start it, stop it, report how it failed.

`spawn_child` starts a `run_child` process with SIGINT ignored from its first line, so a
terminal's Ctrl-C (sent to the whole process group) leaves shutdown to the parent;
`terminate` joins a process, terminating then killing it if it lingers; `child_error`
turns a child's exit code and traceback into the `R2D2ProcessError` the run raises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from r2d2_agent.process import ChildOptions, run_child


class R2D2ProcessError(RuntimeError):
    """A child process of an `R2D2Manager` failed; the message holds its traceback.

    Attributes:
        role: "learner" or "actor".
        index: the actor index (None for the learner).
        exitcode: the child's exit code (negative: killed by that signal), if known.
        child_traceback: the traceback text sent by the child, if it could send one.
    """

    def __init__(self, message: str, role: str, index: int | None = None,
                 exitcode: int | None = None, child_traceback: str | None = None) -> None:
        super().__init__(message)
        self.role, self.index = role, index
        self.exitcode, self.child_traceback = exitcode, child_traceback


def describe_exit(exitcode: int | None) -> str:
    """Human-readable exit status ("exit code 1", "killed by SIGKILL")."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class ChildProcess:
    """A child process and the read end of its event pipe.

    Attributes:
        role: "learner" or "actor".
        index: the actor index (None for the learner).
        process: the multiprocessing process.
        events: read end of the pipe on which the child sends its events.
        error: the traceback the child sent, if any.
        info: what the child reported at exit.
        exited: whether the parent has seen the child exit.
    """

    def __init__(self, role: str, index: int | None, process: Any, events: Connection) -> None:
        self.role, self.index, self.process, self.events = role, index, process, events
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        self.exited = False

    @property
    def name(self) -> str:
        """"learner" or "actor <index>"."""
        return self.role if self.index is None else f"{self.role} {self.index}"


def spawn_child(ctx: BaseContext, role: str, index: int | None, options: ChildOptions,
                main: Callable[..., None], *args: Any) -> ChildProcess:
    """Starts ``run_child(main, options, events, *args)`` in a new process.

    Args:
        ctx: the multiprocessing context.
        role: "learner" or "actor".
        index: the actor index (None for the learner).
        options: how the child prepares itself.
        main: the child's main function (`actor_main`, `learner_main`).
        *args: `main`'s arguments after the event pipe.

    Returns:
        The started child, holding the read end of its event pipe.
    """
    events_r, events_w = ctx.Pipe(duplex=False)
    name = "r2d2-learner" if index is None else f"r2d2-actor-{index}"
    process = ctx.Process(target=run_child, name=name, args=(main, options, events_w, *args))
    try:
        with _sigint_ignored():  # the child starts with SIGINT ignored, from its first line
            process.start()
    except BaseException:
        events_r.close()
        raise
    finally:
        events_w.close()
    return ChildProcess(role, index, process, events_r)


def child_error(child: ChildProcess, what: str, code: int | None) -> R2D2ProcessError:
    """The error to raise for `child`: `what`, its exit status and its traceback."""
    detail = (f"\n--- traceback from the {child.name} process ---\n{child.error.rstrip()}"
              if child.error else " (no traceback: the process was killed or crashed hard)")
    return R2D2ProcessError(f"{what} ({describe_exit(code)}){detail}", child.role,
                            child.index, code, child.error)


def terminate(process: Any, grace: float = 2.0) -> None:
    """Joins a process, terminating then killing it if it does not exit."""
    if process.exitcode is None and grace > 0:
        process.terminate()
        process.join(grace)
    if process.exitcode is None:
        process.kill()
        process.join()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignores SIGINT in the main thread meanwhile.

    A spawned interpreter keeps an inherited "ignore" disposition for SIGINT (it installs
    its KeyboardInterrupt handler only over the default one), so a terminal's Ctrl-C, sent
    to the whole process group, cannot kill a child before `bootstrap` runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None
                      else previous)
