"""A script run as a user runs it, then interrupted as a terminal's Ctrl-C (or a scheduler's
SIGTERM) does.

`interrupt_script` writes the script, starts it in a session of its own, waits for its
`READY <json>` line, sends SIGINT (or the signal it is given) to its whole process group,
and waits for its `RESULT <json>` line and its exit. A script that hangs or fails is
killed with its group (and the shared-memory segments its manager can then no longer
unlink are removed), and the assertion names what was missing with the script's stderr.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace


def _unlink_segments_of(pid: int) -> None:
    """Removes the weights segments (`/dev/shm/r2d2_<pid>_*`) of a killed manager."""
    for path in pathlib.Path("/dev/shm").glob(f"r2d2_{pid}_*"):
        path.unlink(missing_ok=True)


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, so that Python installs its
    `KeyboardInterrupt` handler even if the tests run with SIGINT ignored (as a background
    job of a non-interactive shell, for one); SIGTERM and SIGHUP too (`nohup` ignores
    SIGHUP)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def interrupt_script(
    text: str,
    folder: pathlib.Path,
    env: dict[str, str] | None = None,
    ready_timeout: float = 120,
    sig: signal.Signals = signal.SIGINT,
) -> SimpleNamespace:
    """Runs `text` as `folder/run_manager.py` and interrupts it once it printed READY.

    Args:
        text: The script's source.
        folder: Where it is written and run (its working directory).
        env: The script's environment (default: this process's).
        ready_timeout: Seconds to wait for its READY line.
        sig: The signal sent to its process group (SIGINT: a terminal's Ctrl-C; SIGTERM:
            what `docker stop`, systemd, Kubernetes and Slurm send).

    Returns:
        `ready` and `result` (the JSON of its two lines), `exitcode`, `stderr`, `pid`
        (also its process group and session id) and `seconds` from the signal to its exit.
    """
    script = folder / "run_manager.py"
    script.write_text(text)
    stderr_path = folder / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=folder,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def expect(prefix: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return json.loads(line[len(prefix) :])
        raise AssertionError(f"no {prefix!r} line; stderr:\n{stderr_path.read_text()[-3000:]}")

    try:
        ready = expect("READY ", ready_timeout)
        os.killpg(proc.pid, sig)  # like a terminal's Ctrl-C: the whole group
        start = time.monotonic()
        result = expect("RESULT ", 60)
        exitcode = proc.wait(60)
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:  # a failed run: end the whole session, children included
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.returncode is not None and proc.returncode < 0:  # killed by a signal
            _unlink_segments_of(proc.pid)  # its manager can no longer unlink them
    return SimpleNamespace(
        ready=ready,
        result=result,
        exitcode=exitcode,
        stderr=stderr_path.read_text(),
        pid=proc.pid,
        seconds=seconds,
    )


def run_script(
    text: str,
    folder: pathlib.Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> SimpleNamespace:
    """Runs `text` as `folder/run_manager.py` in a session of its own until it exits.

    A script still running after `timeout` seconds is killed with its group, and the
    assertion says so with its stderr. Segments of a manager killed by a signal are
    removed.

    Returns:
        `exitcode`, `stdout` and `stderr` (text) and `pid`.
    """
    script = folder / "run_manager.py"
    script.write_text(text)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        message = f"the script still ran after {timeout} s; stderr:\n{stderr[-3000:]}"
        raise AssertionError(message) from None
    finally:
        if proc.returncode is not None and proc.returncode < 0:
            _unlink_segments_of(proc.pid)
    return SimpleNamespace(exitcode=proc.returncode, stdout=stdout, stderr=stderr, pid=proc.pid)
