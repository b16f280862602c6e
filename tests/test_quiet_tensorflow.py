"""TensorFlow's native start-up noise is kept out of the processes the library starts.

A real child is spawned the way the manager spawns its learner (`spawn_child` with
`ChildSetup(use_tensorflow=True)`), from a script run in a subprocess whose stderr the
test captures (the child inherits it): quiet by default, the noise back with
`tf_verbose=True`. The filter itself is checked in this process with `capfd`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from r2d2_agent.compat import quiet_native_stderr

NOISE = (
    "All log messages before absl::InitializeLog()",
    "oneDNN custom operations are on",
    "Could not find cuda drivers",
    "failed call to cuInit",
)

SCRIPT = textwrap.dedent(
    """
    import multiprocessing
    import sys

    from r2d2_agent.distributed.mp.bootstrap import ChildSetup
    from r2d2_agent.distributed.mp.children import spawn_child, terminate


    def main(events):
        from r2d2_agent.compat import tf

        events.send(float(tf.constant(1.0) + 1.0))


    if __name__ == "__main__":
        verbose = {"default": None, "verbose": True}[sys.argv[1]]
        setup = ChildSetup("learner", use_tensorflow=True, tf_verbose=verbose)
        child = spawn_child(multiprocessing.get_context("spawn"), "learner", None, setup, main)
        print(child.events.recv(), flush=True)
        child.process.join(60)
        terminate(child.process)
        child.events.close()
    """
)


def _run_child(tmp_path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "spawn_one.py"
    script.write_text(SCRIPT)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TF_CPP_MIN_LOG_LEVEL", "R2D2_TF_VERBOSE")
    }
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def quiet_child(tmp_path_factory):
    return _run_child(tmp_path_factory.mktemp("quiet"), "default")


def test_the_spawned_child_ran_tensorflow(quiet_child):
    assert quiet_child.returncode == 0, quiet_child.stderr
    assert quiet_child.stdout.strip() == "2.0"


@pytest.mark.parametrize("line", NOISE)
def test_a_spawned_child_prints_no_tensorflow_startup_noise(quiet_child, line):
    assert line not in quiet_child.stderr


def test_tf_verbose_lets_the_startup_logs_through(tmp_path):
    done = _run_child(tmp_path, "verbose")
    assert done.returncode == 0, done.stderr
    assert "All log messages before absl::InitializeLog()" in done.stderr


def test_the_filter_keeps_every_other_line(capfd):
    with quiet_native_stderr():
        os.write(2, b"a real warning\n")
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see\n")
        os.write(2, b"another line\n")
    assert capfd.readouterr().err == "a real warning\nanother line\n"


def test_the_filter_restores_stderr_after_an_error(capfd):
    with pytest.raises(ImportError), quiet_native_stderr():
        raise ImportError("no tensorflow")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
