"""`R2D2ProcessError`: how a failed child process surfaces in the parent."""

from __future__ import annotations

import signal

__all__ = ["MAIN_GUARD_HINT", "R2D2ProcessError", "describe_exit"]

MAIN_GUARD_HINT = (
    "spawned processes import your main module, so the code that starts training must run "
    'under `if __name__ == "__main__":`; add that guard to your script'
)
"""What to do when a child failed while importing the main module."""


class R2D2ProcessError(RuntimeError):
    """A child process of an `R2D2Manager` failed; the message holds its traceback.

    Attributes:
        role: "learner" or "actor".
        index: The actor index (None for the learner).
        exitcode: The child's exit code (negative: killed by that signal), if known.
        child_traceback: The traceback text sent by the child, if it could send one.
    """

    def __init__(
        self,
        message: str,
        role: str,
        index: int | None = None,
        exitcode: int | None = None,
        child_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.role = role
        self.index = index
        self.exitcode = exitcode
        self.child_traceback = child_traceback


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
