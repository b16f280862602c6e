"""`R2D2Manager(backend="ray")` without an address joins a cluster that `ray start` made on
this machine (its own module: no other Ray of the tests is running meanwhile)."""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import pytest
import ray

from r2d2_agent.distributed import R2D2Manager

RAY_CLI = pathlib.Path(sys.executable).parent / "ray"


@pytest.fixture
def ray_start(monkeypatch):
    """`ray start --head --block` in a session of its own and its own temp root (so it is
    the only cluster the manager can find); ended with its whole process group."""
    root = tempfile.mkdtemp(prefix="r2d2join", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", root)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    proc = subprocess.Popen(
        [str(RAY_CLI), "start", "--head", "--num-cpus=3", "--include-dashboard=false", "--block"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "RAY_TMPDIR": root},
    )
    bootstrap = pathlib.Path(root) / "ray" / "ray_current_cluster"
    deadline = time.monotonic() + 60
    while not bootstrap.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # the head's raylet registers after the file is written
    try:
        yield bootstrap.read_text().strip()
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # `--block` stops the node on Ctrl-C
        try:
            proc.wait(10)  # 1.5 s alone; in the full suite it once sat out a 30 s wait
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the node is left
        except ProcessLookupError:
            pass
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)  # the node's session folder


def test_manager_without_an_address_joins_the_cluster_ray_start_made(ray_start, make_config):
    assert not ray.is_initialized()
    config = make_config(memory_capacity=200, memory_warmup=200, actor_sync_interval=50)
    manager = R2D2Manager(
        functools.partial(gym.make, "CartPole-v1"), config, backend="ray", progress=False
    )
    joined = []

    def on_progress(p):
        if not joined:
            joined.append(ray.get_runtime_context().gcs_address)

    result = manager.train(nb_steps=300, max_seconds=240, on_progress=on_progress)
    assert result.stop_reason == "nb_steps"
    assert joined == [ray_start]  # the cluster `ray start` made, not a new local Ray
    assert not ray.is_initialized()  # disconnected, as found
