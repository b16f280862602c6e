"""TensorFlow is loaded only where it is needed: with the ready callbacks attached to a
CartPole manager run, the learner is the only process that maps TensorFlow's library; the
parent never imports it and the numpy actors never load it.

One real run, in a fresh interpreter (this test process imported TensorFlow already),
serves both tests. The script reads `/proc/<pid>/maps` of every child about ten times a
second from `on_progress` and prints, as JSON, whether `tensorflow` is in the parent's
`sys.modules` and which children mapped `libtensorflow`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")

SCRIPT = textwrap.dedent(
    """
    import functools, json, multiprocessing, os, sys
    import gymnasium as gym
    from r2d2_agent import R2D2Config, R2D2Manager
    from r2d2_agent.callbacks import (CheckpointCallback, RunLogCallback,
                                      StateDiscrepancyCallback, TensorBoardCallback)

    def maps_tensorflow(pid):
        try:
            with open(f"/proc/{pid}/maps") as file:
                return "libtensorflow" in file.read()
        except OSError:  # the child has just ended
            return False

    seen = {}

    def watch(progress):
        for child in multiprocessing.active_children():
            seen[child.name] = seen.get(child.name, False) or maps_tensorflow(child.pid)

    if __name__ == "__main__":
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=8, dense_units=8,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=64, memory_warmup=4, train_interval=2, seed=0)
        callbacks = [CheckpointCallback(sys.argv[1] + "/checkpoints", interval=5),
                     RunLogCallback(sys.argv[1] + "/run", interval=5),
                     TensorBoardCallback(sys.argv[1] + "/tensorboard", interval=5),
                     StateDiscrepancyCallback(sys.argv[1] + "/run", interval=5, write_seconds=0)]
        with R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config, actor_num=2,
                         callbacks=callbacks, progress=False) as manager:
            result = manager.train(nb_steps=600, max_seconds=120, on_progress=watch)
        print(json.dumps({"parent": "tensorflow" in sys.modules, "children": seen,
                          "updates": result.learner_updates,
                          "discrepancy": os.path.exists(
                              os.path.join(sys.argv[1], "run", "state_discrepancy.json"))}))
    """
)


@pytest.fixture(scope="module")
def placement(tmp_path_factory):
    """What the run's processes loaded (the script's JSON line)."""
    folder = tmp_path_factory.mktemp("placement")
    script = folder / "run_manager.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["updates"] > 0, "the run did not train: the learner hooks never ran"
    assert result["discrepancy"], "StateDiscrepancyCallback measured nothing"
    return result


def test_only_the_learner_maps_tensorflow_with_the_ready_callbacks(placement):
    loaded = sorted(name for name, mapped in placement["children"].items() if mapped)
    assert len(placement["children"]) == 3, placement["children"]
    assert loaded == ["r2d2-learner"], placement["children"]


def test_the_parent_never_imports_tensorflow_with_the_ready_callbacks(placement):
    assert placement["parent"] is False
