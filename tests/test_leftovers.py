"""Tests of `r2d2_agent.leftovers`: a killed run's segments and checkpoint temp files are
removed by the next run, a live run's never (also with a reused PID or a second run on the
machine); the `r2d2-leftovers` command lists and removes them.

Owners are real processes: a helper script (no TensorFlow, half a second) creates a weights
segment and a checkpoint temp file, then is killed with its whole process group (its
resource tracker too, as a scheduler's SIGKILL does), or is kept alive as a concurrent run.
"""

from __future__ import annotations

import functools
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import gymnasium as gym
import pytest

from r2d2_agent import leftovers
from r2d2_agent.callbacks import CheckpointCallback
from r2d2_agent.checkpoints import prune_checkpoints
from r2d2_agent.leftovers import (
    find_segments,
    find_temp_files,
    owner_status,
    owner_tag,
    reclaim_segments,
    reclaim_temp_files,
    segment_name,
    temp_path,
)

linux_only = pytest.mark.skipif(
    not leftovers._linux(), reason="owner checks need /proc (elsewhere every owner is unknown)"
)

_OWNER_SCRIPT = textwrap.dedent(
    """
    import sys
    from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec
    from r2d2_agent.leftovers import temp_path

    segment = SharedWeights.create(WeightsSpec(((16,),), ("<f4",)), name_prefix=sys.argv[1])
    temp = temp_path(sys.argv[2])
    with open(temp, "wb") as file:   # a checkpoint half written
        file.write(b"x" * 1000)
    print(segment.name, temp, flush=True)
    sys.stdin.read()                 # until the test closes our stdin (or kills us)
    segment.close()
    segment.unlink()
    """
)


def _start_owner(prefix: str, checkpoint: pathlib.Path) -> SimpleNamespace:
    """A process in a session of its own that owns a segment and a checkpoint temp file."""
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER_SCRIPT, prefix, str(checkpoint)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    name, temp = proc.stdout.readline().split()
    return SimpleNamespace(proc=proc, segment=f"/dev/shm/{name}", temp=temp)


def _kill_group(owner: SimpleNamespace) -> None:
    """SIGKILL to the owner's whole group (its resource tracker dies too), then reap it."""
    os.killpg(owner.proc.pid, signal.SIGKILL)
    owner.proc.wait()


def _stop(owner: SimpleNamespace) -> None:
    """Lets a live owner exit normally (it unlinks its segment, leaves its temp file)."""
    owner.proc.stdin.close()
    owner.proc.wait(30)
    pathlib.Path(owner.temp).unlink(missing_ok=True)


@pytest.fixture
def dead_and_live(tmp_path):
    """Two owners, as two runs on the machine: `dead` killed with its group, `live` running.
    Both wrote a temp file for a checkpoint in `tmp_path / "ckpt"`."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    dead = _start_owner("r2d2t", folder / "ckpt-0000000001.h5")
    live = _start_owner("r2d2t", folder / "ckpt-0000000002.h5")
    _kill_group(dead)
    yield SimpleNamespace(dead=dead, live=live, folder=folder)
    _stop(live)
    for path in (dead.segment, dead.temp):
        pathlib.Path(path).unlink(missing_ok=True)


def _tag(pid: int, start: int, scope: str) -> str:
    return f"{pid}_{start}_{scope}"


def _own_parts() -> tuple[int, int, str]:
    pid, start, scope = owner_tag().split("_")
    return int(pid), int(start), scope


# ----------------------------------------------------------------- owners ----------
@linux_only
def test_this_process_is_a_live_owner():
    pid, start, scope = _own_parts()
    assert pid == os.getpid()
    assert owner_status(pid, start, scope)[0] == "alive"


@linux_only
def test_a_reused_pid_is_a_dead_owner():
    """Same PID, another start time: the PID was reused by a newer process."""
    pid, start, scope = _own_parts()
    owner, reason = owner_status(pid, start - 1, scope)
    assert owner == "dead" and "newer process" in reason


@linux_only
def test_a_pid_that_no_process_has_is_a_dead_owner():
    pid_max = int(pathlib.Path("/proc/sys/kernel/pid_max").read_text())
    free = next(p for p in range(pid_max - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))
    _, start, scope = _own_parts()
    assert owner_status(free, start, scope)[0] == "dead"


@linux_only
@pytest.mark.parametrize(
    ("part", "expected"),
    [(0, "unknown"), (6, "dead"), (12, "unknown")],
    ids=["another machine", "an earlier boot", "another PID namespace"],
)
def test_an_owner_elsewhere_is_unknown_unless_it_ran_before_the_last_boot(part, expected):
    pid, start, scope = _own_parts()
    other = "f" if scope[part] != "f" else "e"
    changed = scope[:part] + other + scope[part + 1 :]
    assert owner_status(pid, start, changed)[0] == expected


def test_a_name_without_start_time_is_an_unknown_owner():
    assert owner_status(os.getpid(), None, None)[0] == "unknown"


def test_without_proc_names_carry_the_pid_only_and_owners_are_unknown(monkeypatch):
    monkeypatch.setattr(leftovers, "_linux", lambda: False)
    monkeypatch.setattr(leftovers, "_OWN_TAG", {})
    assert owner_tag() == str(os.getpid())
    assert segment_name("r2d2").startswith(f"r2d2_{os.getpid()}_")
    assert owner_status(os.getpid(), 1, "0" * 18)[0] == "unknown"


def test_names_carry_the_owner_tag(tmp_path):
    tag = owner_tag()
    assert segment_name("r2d2").startswith(f"r2d2_{tag}_")
    assert temp_path(str(tmp_path / "ckpt-1.h5")) == str(tmp_path / f".ckpt-1.h5.{tag}.tmp")


# ----------------------------------------------------------------- finding, removing
def _fake(folder: pathlib.Path, name: str) -> pathlib.Path:
    path = folder / name
    path.write_bytes(b"x" * 10)
    return path


@linux_only
def test_reclaiming_segments_removes_dead_owners_only(tmp_path):
    """In a stand-in for /dev/shm: a live owner's (this process), a reused PID's, a tag-less
    old name's and another program's file."""
    pid, start, scope = _own_parts()
    live = _fake(tmp_path, f"r2d2_{_tag(pid, start, scope)}_0123abcd")
    reused = _fake(tmp_path, f"r2d2t_{_tag(pid, start + 7, scope)}_0123abcd")
    old = _fake(tmp_path, f"r2d2_{pid}_0123abcd")
    other = _fake(tmp_path, "psm_12345")
    found = {pathlib.Path(x.path).name: x.owner for x in find_segments(str(tmp_path))}
    assert found == {live.name: "alive", reused.name: "dead", old.name: "unknown"}
    removed = reclaim_segments(str(tmp_path))
    assert [pathlib.Path(x.path) for x in removed] == [reused]
    assert live.exists() and old.exists() and other.exists() and not reused.exists()


@linux_only
def test_reclaiming_temp_files_removes_dead_writers_only(tmp_path):
    pid, start, scope = _own_parts()
    live = _fake(tmp_path, f".ckpt-0000000001.h5.{_tag(pid, start, scope)}.tmp")
    reused = _fake(tmp_path, f".ckpt-0000000002.h5.{_tag(pid, start + 7, scope)}.tmp")
    old = _fake(tmp_path, f".ckpt-0000000003.h5.{pid}.tmp")
    not_ours = _fake(tmp_path, ".notes.txt.123.tmp")
    found = {pathlib.Path(x.path).name: x.owner for x in find_temp_files(tmp_path)}
    assert found == {live.name: "alive", reused.name: "dead", old.name: "unknown"}
    reclaim_temp_files(tmp_path)
    assert live.exists() and old.exists() and not_ours.exists() and not reused.exists()


# ----------------------------------------------------------------- real owners -----
@linux_only
def test_a_killed_owner_leaves_a_segment_and_a_temp_file_that_are_then_reclaimed(dead_and_live):
    run = dead_and_live
    assert os.path.exists(run.dead.segment) and os.path.exists(run.dead.temp)
    owners = {x.path: x.owner for x in find_segments() + find_temp_files(run.folder)}
    assert owners[run.dead.segment] == owners[run.dead.temp] == "dead"
    assert owners[run.live.segment] == owners[run.live.temp] == "alive"
    reclaim_segments()
    reclaim_temp_files(run.folder)
    assert not os.path.exists(run.dead.segment) and not os.path.exists(run.dead.temp)
    assert os.path.exists(run.live.segment) and os.path.exists(run.live.temp)


@linux_only
def test_pruning_a_checkpoint_directory_removes_a_killed_writers_temp_file(dead_and_live):
    run = dead_and_live
    for n in (1, 2, 3):
        _fake(run.folder, f"ckpt-{n:010d}.h5")
    assert [os.path.basename(p) for p in prune_checkpoints(run.folder, keep=2)] == [
        "ckpt-0000000001.h5"
    ]
    assert not os.path.exists(run.dead.temp) and os.path.exists(run.live.temp)


@linux_only
@pytest.mark.parametrize("single_file", [False, True], ids=["directory", "one file"])
def test_checkpoint_callback_reclaims_when_the_learner_begins(dead_and_live, single_file):
    run = dead_and_live
    path = run.folder / "latest.h5" if single_file else run.folder
    CheckpointCallback(path).on_r2d2_learner_begin(learner=None)
    assert not os.path.exists(run.dead.temp) and os.path.exists(run.live.temp)


@linux_only
def test_the_command_lists_then_removes_the_dead_owners_leftovers(dead_and_live, capsys):
    run = dead_and_live
    assert leftovers.main([str(run.folder)]) == 0
    listed = capsys.readouterr().out
    assert "dead     segment" in listed and run.dead.segment in listed
    assert run.dead.temp in listed and run.live.temp in listed
    assert os.path.exists(run.dead.segment)  # listing removes nothing
    assert leftovers.main(["--remove", str(run.folder)]) == 0
    assert "removed  segment" in capsys.readouterr().out
    assert not os.path.exists(run.dead.segment) and not os.path.exists(run.dead.temp)
    assert os.path.exists(run.live.segment) and os.path.exists(run.live.temp)


@pytest.mark.parametrize("argv", [["--unknown"], ["/no/such/directory"]])
def test_the_command_refuses_bad_arguments(argv):
    with pytest.raises(SystemExit) as info:
        leftovers.main(argv)
    assert info.value.code == 2


@linux_only
def test_the_next_manager_run_removes_a_killed_runs_segment_and_keeps_a_live_runs(
    dead_and_live, make_config
):
    """The manager's own prefix (r2d2): a killed run's segment is gone once the next run
    started, a concurrent run's stays, and the run itself leaves none of its own."""
    from r2d2_agent.distributed import R2D2Manager

    folder = dead_and_live.folder
    killed, concurrent = (
        _start_owner("r2d2", folder / "a.h5"),
        _start_owner("r2d2", folder / "b.h5"),
    )
    _kill_group(killed)
    try:
        config = make_config(memory_capacity=200, memory_warmup=200)  # never trains
        factory = functools.partial(gym.make, "CartPole-v1")
        with R2D2Manager(factory, config, actor_num=1, progress=False) as manager:
            result = manager.train(nb_steps=100, max_seconds=120)
        assert result.env_steps >= 100
        assert not os.path.exists(killed.segment)
        assert os.path.exists(concurrent.segment)
        mine = [x for x in find_segments() if x.pid == os.getpid()]
        assert mine == []
    finally:
        _stop(concurrent)
        for path in (killed.segment, killed.temp):
            pathlib.Path(path).unlink(missing_ok=True)
