"""Tests of `r2d2_agent.leftovers`: a killed run's segments and checkpoint temp files are
removed by the next run, a live run's never (also with a reused PID or a second run on the
machine); the `r2d2-leftovers` command lists and removes them.

Owners are real processes: a helper script (no TensorFlow, half a second) creates a weights
segment and a checkpoint temp file, then is killed with its whole process group (its
resource tracker too, as a scheduler's SIGKILL does), or is kept alive as a concurrent run.
"""

from __future__ import annotations

import functools
import json
import multiprocessing.connection
import multiprocessing.process
import multiprocessing.util
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from types import SimpleNamespace

import gymnasium as gym
import pytest

from r2d2_agent import leftovers
from r2d2_agent.callbacks import CheckpointCallback
from r2d2_agent.checkpoints import prune_checkpoints
from r2d2_agent.distributed.mp.temp_folder import use_owner_tagged_folder
from r2d2_agent.leftovers import (
    MP_FOLDER_FALLBACK_DIRS,
    find_mp_folders,
    find_segments,
    find_temp_files,
    mp_folder_dirs,
    owner_status,
    owner_tag,
    reclaim_mp_folders,
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
    from r2d2_agent import leftovers
    from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec
    if len(sys.argv) > 3:            # tag as written on host sys.argv[3] (see _start_owner)
        scope = leftovers._machine_scope()
        leftovers._machine_scope = lambda: (sys.argv[3], scope[1], scope[2])
        leftovers._OWN_TAG.clear()
    from r2d2_agent.distributed.mp.temp_folder import use_owner_tagged_folder
    from r2d2_agent.leftovers import temp_path

    segment = SharedWeights.create(WeightsSpec(((16,),), ("<f4",)), name_prefix=sys.argv[1])
    temp = temp_path(sys.argv[2])
    with open(temp, "wb") as file:   # a checkpoint half written
        file.write(b"x" * 1000)
    folder = use_owner_tagged_folder()  # as a manager's, with a socket in it
    open(folder + "/listener-x", "wb").close()
    print(segment.name, temp, folder, flush=True)
    sys.stdin.read()                 # until the test closes our stdin (or kills us)
    segment.close()
    segment.unlink()
    """
)


def _child_env() -> dict[str, str]:
    """The environment of a helper process: this one's, importing r2d2_agent from the repo."""
    return {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent.parent)}


_TEST_HOST = "7e57a0"
"""The host hash of `dead_and_live`'s owners: on the real host's scope a manager starting
in another pytest worker could reclaim the killed owner's segment and folder (`/dev/shm`,
`/tmp`) before the test looks; to every process but the test's they are another
machine's (never reclaimed), and the test reads them with `_TEST_HOST` as its own."""


def _start_owner(prefix: str, checkpoint: pathlib.Path, host: str | None = None) -> SimpleNamespace:
    """A process in a session of its own that owns a segment, a checkpoint temp file and
    a multiprocessing folder, tagged with this machine's scope or with `host` as its host
    hash."""
    host_arg = [] if host is None else [host]
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER_SCRIPT, prefix, str(checkpoint), *host_arg],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
        start_new_session=True,
    )
    name, temp, folder = proc.stdout.readline().split()
    return SimpleNamespace(proc=proc, segment=f"/dev/shm/{name}", temp=temp, folder=folder)


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
def dead_and_live(tmp_path, monkeypatch):
    """Two owners, as two runs on the machine: `dead` killed with its group, `live` running.
    Both wrote a temp file for a checkpoint in `tmp_path / "ckpt"`. Their tags name
    `_TEST_HOST`, which this process takes for its own host while the test runs."""
    scope = leftovers._machine_scope()
    monkeypatch.setattr(leftovers, "_machine_scope", lambda: (_TEST_HOST, *scope[1:]))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    dead = _start_owner("r2d2t", folder / "ckpt-0000000001.h5", host=_TEST_HOST)
    live = _start_owner("r2d2t", folder / "ckpt-0000000002.h5", host=_TEST_HOST)
    _kill_group(dead)
    yield SimpleNamespace(dead=dead, live=live, folder=folder)
    _stop(live)
    for path in (dead.segment, dead.temp):
        pathlib.Path(path).unlink(missing_ok=True)
    shutil.rmtree(dead.folder, ignore_errors=True)


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
def test_a_killed_owner_leaves_a_segment_a_temp_file_and_a_folder_that_are_then_reclaimed(
    dead_and_live,
):
    run = dead_and_live
    assert os.path.exists(run.dead.segment) and os.path.exists(run.dead.temp)
    assert os.path.exists(os.path.join(run.dead.folder, "listener-x"))
    found = find_segments() + find_temp_files(run.folder) + find_mp_folders()
    owners = {x.path: x.owner for x in found}
    assert owners[run.dead.segment] == owners[run.dead.temp] == owners[run.dead.folder] == "dead"
    assert owners[run.live.segment] == owners[run.live.temp] == owners[run.live.folder] == "alive"
    reclaim_segments()
    reclaim_temp_files(run.folder)
    reclaim_mp_folders()
    for path in (run.dead.segment, run.dead.temp, run.dead.folder):
        assert not os.path.exists(path)
    for path in (run.live.segment, run.live.temp, run.live.folder):
        assert os.path.exists(path)


@linux_only
def test_another_process_on_this_machine_keeps_the_fixtures_dead_owners_leftovers(
    dead_and_live,
):
    """What keeps the test above from racing a manager in another pytest worker: that
    worker's reclaim (as a process of this host sees it) leaves `_TEST_HOST`'s owners."""
    run = dead_and_live
    reclaim = "from r2d2_agent import leftovers as l; l.reclaim_segments(); l.reclaim_mp_folders()"
    subprocess.run([sys.executable, "-c", reclaim], env=_child_env(), check=True, timeout=60)
    assert os.path.exists(run.dead.segment) and os.path.exists(run.dead.folder)


@linux_only
def test_an_owner_that_exits_normally_removes_its_folder(dead_and_live):
    live = dead_and_live.live
    live.proc.stdin.close()
    live.proc.wait(30)
    assert not os.path.exists(live.folder)


def test_a_removed_multiprocessing_folder_is_replaced(monkeypatch, tmp_path):
    config = multiprocessing.process.current_process()._config
    monkeypatch.setitem(config, "tempdir", str(tmp_path / "removed by a temp cleaner"))
    folder = use_owner_tagged_folder()
    try:
        assert os.path.isdir(folder) and config["tempdir"] == folder
        assert os.path.basename(folder).startswith(f"r2d2mp_{owner_tag()}_")
    finally:
        shutil.rmtree(folder)


def test_a_multiprocessing_folder_in_use_is_kept(monkeypatch, tmp_path):
    config = multiprocessing.process.current_process()._config
    monkeypatch.setitem(config, "tempdir", str(tmp_path))  # multiprocessing made one already
    assert use_owner_tagged_folder() == str(tmp_path)
    assert config["tempdir"] == str(tmp_path)


@pytest.fixture
def long_temp_dir(monkeypatch, tmp_path):
    """`tempfile.gettempdir()` 70 characters long (a job's scratch folder), and no
    multiprocessing folder yet in this process."""
    long = tmp_path / ("t" * max(1, 70 - len(str(tmp_path)) - 1))
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    monkeypatch.setitem(multiprocessing.process.current_process()._config, "tempdir", None)
    return str(long)


def test_a_temp_folder_too_long_for_a_socket_puts_the_folder_where_one_fits(long_temp_dir):
    folder = use_owner_tagged_folder()
    try:
        assert os.path.dirname(folder) == MP_FOLDER_FALLBACK_DIRS[0]
        with multiprocessing.connection.Listener(family="AF_UNIX") as listener:
            assert os.path.dirname(listener.address) == folder  # the socket binds in it
        assert folder in [x.path for x in find_mp_folders()]  # where the next run looks
    finally:
        shutil.rmtree(folder)


def test_the_next_run_looks_in_the_temp_folder_and_the_fallbacks_each_once(monkeypatch, tmp_path):
    link = tmp_path / "temp"
    link.symlink_to(MP_FOLDER_FALLBACK_DIRS[0])  # TMPDIR naming /tmp another way
    monkeypatch.setattr(tempfile, "tempdir", str(link))
    dirs = mp_folder_dirs()
    assert dirs[0] == str(link) and MP_FOLDER_FALLBACK_DIRS[0] not in dirs
    assert len({os.path.realpath(d) for d in dirs}) == len(dirs)  # no folder twice


def test_no_folder_short_enough_for_a_socket_is_a_clear_error_naming_the_longest_that_is(
    long_temp_dir, monkeypatch
):
    monkeypatch.setattr(leftovers, "MP_FOLDER_FALLBACK_DIRS", ())
    with pytest.raises(
        OSError, match=rf"{long_temp_dir}.*set TMPDIR to a folder of at most"
    ) as info:
        use_owner_tagged_folder()
    assert os.listdir(long_temp_dir) == []
    longest = int(re.search(r"at most (\d+) bytes", str(info.value))[1])
    just_fits = "/tmp/" + "s" * (longest - len("/tmp/"))  # a TMPDIR of that length works
    os.mkdir(just_fits)
    try:
        monkeypatch.setattr(tempfile, "tempdir", just_fits)
        folder = use_owner_tagged_folder()
        with multiprocessing.connection.Listener(family="AF_UNIX") as listener:
            assert os.path.dirname(listener.address) == folder
        assert os.path.dirname(folder) == just_fits
    finally:
        shutil.rmtree(just_fits)


def test_the_folder_is_the_processs_multiprocessing_folder_and_names_its_owner(monkeypatch):
    config = multiprocessing.process.current_process()._config
    monkeypatch.setitem(config, "tempdir", None)  # restored after the test, even if absent
    folder = use_owner_tagged_folder()
    try:
        assert multiprocessing.util.get_temp_dir() == folder
        assert os.path.basename(folder).startswith(f"r2d2mp_{owner_tag()}_")
        owners = {x.path: x.owner for x in find_mp_folders()}  # (an earlier run's too)
        assert owners[folder] == "alive"
    finally:
        shutil.rmtree(folder)


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
    assert "dead     mp folder" in listed and run.dead.folder in listed
    assert run.dead.temp in listed and run.live.temp in listed
    assert os.path.exists(run.dead.segment)  # listing removes nothing
    assert leftovers.main(["--remove", str(run.folder)]) == 0
    assert "removed  segment" in capsys.readouterr().out
    assert not os.path.exists(run.dead.segment) and not os.path.exists(run.dead.temp)
    assert not os.path.exists(run.dead.folder)
    assert os.path.exists(run.live.segment) and os.path.exists(run.live.temp)
    assert os.path.exists(run.live.folder)


@pytest.mark.parametrize("argv", [["--unknown"], ["/no/such/directory"]])
def test_the_command_refuses_bad_arguments(argv):
    with pytest.raises(SystemExit) as info:
        leftovers.main(argv)
    assert info.value.code == 2


@linux_only
def test_the_next_manager_run_removes_a_killed_runs_segment_and_keeps_a_live_runs(
    tmp_path, make_config
):
    """The manager's own prefix (r2d2): a killed run's segment is gone once the next run
    started, a concurrent run's stays, and the run itself leaves none of its own."""
    from r2d2_agent.distributed import R2D2Manager

    folder = tmp_path
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
        assert not os.path.exists(killed.segment) and not os.path.exists(killed.folder)
        assert os.path.exists(concurrent.segment) and os.path.exists(concurrent.folder)
        mine = [x for x in find_segments() if x.pid == os.getpid()]
        assert mine == []
    finally:
        _stop(concurrent)
        for path in (killed.segment, killed.temp):
            pathlib.Path(path).unlink(missing_ok=True)
        shutil.rmtree(killed.folder, ignore_errors=True)


# ----------------------------------------------------------------- atomic writes ----
# Every file the library writes whole goes through `atomic_write`: the writers below are
# all of them (a source scan checks that no other module renames a file itself).
_WRITERS_SCRIPT = textwrap.dedent(
    """
    import json, os, pathlib, sys, threading
    from types import SimpleNamespace
    import numpy as np

    from r2d2_agent.checkpoints import TrainingCounters, TrainingState, write_checkpoint
    from r2d2_agent.networks.weights_io import save_weights_atomic
    from r2d2_agent.plot import plot_run, plot_state_discrepancy
    from r2d2_agent.roles.state_discrepancy import write_episodes
    from r2d2_agent.runlog import write_json_atomic

    folder = pathlib.Path(sys.argv[1])


    class Model:  # Keras's save_weights writes the file it is given (tested with Keras too)
        def save_weights(self, path, save_format):
            pathlib.Path(path).write_bytes(b"new weights")


    def state():
        w = [np.arange(4, dtype=np.float32)]
        counters = TrainingCounters(1, 1, 1, 1, (1,), (1,))
        return TrainingState(w, w, [], ("w",), (), counters, {}, "0.0")


    discrepancy = SimpleNamespace(by_step={"stored": [0.1, 0.2]}, burnin=0)
    WRITERS = {
        "ckpt-0000000001.h5": lambda p: write_checkpoint(p, state()),
        "weights.h5": lambda p: save_weights_atomic(Model(), p, overwrite=True),
        "run.json": lambda p: write_json_atomic(p, {"a": 1}),
        "result.json": lambda p: write_json_atomic(p, {"b": 2}),
        "learning_curve.png": lambda p: plot_run(folder, p),
        "discrepancy.png": lambda p: plot_state_discrepancy(discrepancy, p),
        "actor-0.npz": lambda p: write_episodes(p, [], actor=0),
    }
    reached = threading.Semaphore(0)


    def frozen_replace(src, dst):  # each write stops here: temp file complete, not renamed
        print(src, flush=True)
        reached.release()
        threading.Event().wait()


    def run(write, path):
        try:
            write(path)
        except BaseException as exc:  # reported, so that the test fails instead of waiting
            print(f"failed: {path}: {exc!r}", flush=True)
            reached.release()


    os.replace = frozen_replace
    for name, write in WRITERS.items():  # one at a time: each waits in its own thread
        threading.Thread(target=run, args=(write, str(folder / name)), daemon=True).start()
        reached.acquire()
    print("ready", flush=True)
    sys.stdin.read()                     # until the test closes our stdin (or kills us)
    """
)
_TARGETS = (
    "ckpt-0000000001.h5",
    "weights.h5",
    "run.json",
    "result.json",
    "learning_curve.png",
    "discrepancy.png",
    "actor-0.npz",
)
_OLD = b'{"old": true}'  # what each target held before (JSON: plot_run reads run.json)


def _start_writer(folder: pathlib.Path) -> SimpleNamespace:
    """A process (a session of its own) that is writing each kind of file into `folder`,
    every write stopped after its temp file is complete and before the rename."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITERS_SCRIPT, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
        start_new_session=True,
    )
    temps = []
    for line in proc.stdout:
        if line.strip() == "ready":
            break
        temps.append(line.strip())
    writer = SimpleNamespace(proc=proc, temps=temps)
    if len(temps) != len(_TARGETS) or any(t.startswith("failed") for t in temps):
        _kill_group(writer)
        pytest.fail(f"the writer did not get to each rename: {temps}")
    return writer


@pytest.fixture
def writers(tmp_path):
    """Two runs writing the same files of one run directory: `live` keeps going, `dead`
    (started second, while `live` was writing) is killed with its group mid-write.
    Each target held `_OLD` before."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in _TARGETS:
        (folder / name).write_bytes(_OLD)
    (folder / "actor-0.jsonl").write_text(
        '{"actor": 0, "episode": 1, "episode_return": 1.0, "env_steps": 10}\n'
    )
    live = _start_writer(folder)
    try:
        dead = _start_writer(folder)
        _kill_group(dead)
        yield SimpleNamespace(folder=folder, live=live, dead=dead)
    finally:
        live.proc.stdin.close()
        live.proc.wait(30)
    for path in live.temps + dead.temps:
        pathlib.Path(path).unlink(missing_ok=True)


@linux_only
def test_a_write_killed_mid_way_leaves_the_target_whole_and_a_tagged_temp_file(writers):
    """SIGKILL after each temp file was complete, before its rename: every target still
    holds its previous content, and each temp file is `.<target>.<dead's tag>.tmp`."""
    pid = writers.dead.proc.pid
    for name in _TARGETS:
        assert (writers.folder / name).read_bytes() == _OLD
    names = sorted(pathlib.Path(t).name for t in writers.dead.temps)
    tag = names[0].split(".")[-2]
    assert tag.startswith(f"{pid}_")
    assert names == sorted(f".{name}.{tag}.tmp" for name in _TARGETS)
    for temp in writers.dead.temps + writers.live.temps:
        assert pathlib.Path(temp).parent == writers.folder and os.path.exists(temp)


@linux_only
def test_the_command_removes_a_killed_writers_temp_files_of_each_kind_and_keeps_a_live_ones(
    writers, capsys
):
    # The live writer's own reclaim kept nothing of the dead (it was alive then); the
    # dead one's, started second, kept the live writer's.
    assert leftovers.main(["--json", str(writers.folder.parent)]) == 0
    rows = {row["path"]: row for row in json.loads(capsys.readouterr().out)}
    assert {rows[t]["owner"] for t in writers.dead.temps} == {"dead"}
    assert {rows[t]["owner"] for t in writers.live.temps} == {"alive"}
    assert leftovers.main(["--remove", str(writers.folder.parent)]) == 0
    capsys.readouterr()
    assert not any(os.path.exists(t) for t in writers.dead.temps)
    assert all(os.path.exists(t) for t in writers.live.temps)


@linux_only
def test_a_run_log_starting_in_the_directory_reclaims_the_killed_writers_temp_files(writers):
    from r2d2_agent.callbacks import RunLogCallback

    RunLogCallback(writers.folder, tensorboard=False).on_r2d2_train_begin()
    assert not any(os.path.exists(t) for t in writers.dead.temps)
    assert all(os.path.exists(t) for t in writers.live.temps)


@linux_only
def test_the_next_write_of_a_file_reclaims_its_killed_writers_temp_file(writers):
    from r2d2_agent.runlog import write_json_atomic

    write_json_atomic(writers.folder / "result.json", {"c": 3})
    gone = [t for t in writers.dead.temps if not os.path.exists(t)]
    assert [pathlib.Path(t).name.split(".")[1] for t in gone] == ["result"]
    assert all(os.path.exists(t) for t in writers.live.temps)


def _library_writers(tmp_path: pathlib.Path) -> dict[str, Callable[[pathlib.Path], object]]:
    """Each whole-file writer of the library, as `write(path)`."""
    import numpy as np

    from r2d2_agent.checkpoints import TrainingCounters, TrainingState, write_checkpoint
    from r2d2_agent.compat import keras
    from r2d2_agent.networks.weights_io import save_weights_atomic
    from r2d2_agent.plot import plot_run, plot_state_discrepancy
    from r2d2_agent.roles.state_discrepancy import write_episodes
    from r2d2_agent.runlog import write_json_atomic

    run_dir = tmp_path / "logged"
    run_dir.mkdir()
    (run_dir / "actor-0.jsonl").write_text(
        '{"actor": 0, "episode": 1, "episode_return": 1.0, "env_steps": 10}\n'
    )
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    discrepancy = SimpleNamespace(by_step={"zero": [0.3, 0.1]}, burnin=2)
    w = [np.arange(4, dtype=np.float32)]
    state = TrainingState(w, w, [], ("w",), (), TrainingCounters(1, 1, 1, 1, (1,), (1,)), {}, "0")
    return {
        "checkpoint": lambda p: write_checkpoint(p, state),
        "weights": lambda p: save_weights_atomic(model, p, overwrite=True),
        "json": lambda p: write_json_atomic(p, {"a": [1, 2]}),
        "learning curve": lambda p: plot_run(run_dir, p),
        "state discrepancy": lambda p: plot_state_discrepancy(discrepancy, p),
        "recorded episodes": lambda p: write_episodes(p, [], actor=0),
    }


_SUFFIX = {
    "checkpoint": "h5",
    "weights": "h5",
    "json": "json",
    "learning curve": "png",
    "state discrepancy": "png",
    "recorded episodes": "npz",
}


@pytest.mark.parametrize("kind", list(_SUFFIX))
def test_each_writer_renames_a_complete_owner_tagged_temp_file_over_the_target(
    kind, tmp_path, monkeypatch
):
    """The rename is the only moment the target changes: until then it holds its previous
    content, and the file renamed is `.<name>.<tag>.tmp` beside it, already complete
    (its bytes are the target's afterwards)."""
    write = _library_writers(tmp_path)[kind]
    target = tmp_path / "out" / f"file.{_SUFFIX[kind]}"
    target.parent.mkdir()
    target.write_bytes(b"old")
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((src, dst, pathlib.Path(dst).read_bytes(), pathlib.Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write(target)
    [(src, dst, before, renamed)] = renames
    assert src == str(target.parent / f".{target.name}.{owner_tag()}.tmp")
    assert os.fspath(dst) == str(target) and before == b"old"
    assert target.read_bytes() == renamed != b"old"
    assert os.listdir(target.parent) == [target.name]


def test_a_failed_write_leaves_the_previous_file_and_no_temp_file(tmp_path):
    from r2d2_agent.runlog import write_json_atomic

    target = tmp_path / "run.json"
    write_json_atomic(target, {"a": 1})
    before = target.read_bytes()
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": 2, "b": object()})  # fails half-way through
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.json"]


def test_no_library_module_renames_files_but_atomic_write():
    """One helper names every temp file: no other module renames a file or names a temp
    file after its PID."""
    package = pathlib.Path(leftovers.__file__).parent
    offenders = [
        f"{path.relative_to(package)}: {needle}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "leftovers.py" or path.parent != package
        for needle in ("os.replace(", "os.rename(", "getpid()}.tmp", ".tmp.")
        if needle in path.read_text()
    ]
    assert offenders == []


def test_older_versions_temp_names_are_listed_with_an_unknown_owner(tmp_path):
    pid = os.getpid()
    legacy = [
        f".ckpt-0000000003.h5.{pid}.tmp",  # checkpoint
        f".weights.h5.{pid}.tmp.h5",  # save_weights
        f"run.json.{pid}.tmp",  # write_json_atomic
        f"learning_curve.png.{pid}.tmp.png",  # plots
    ]
    for name in [*legacy, f"notes.txt.{pid}.tmp", f".notes.txt.{pid}.tmp"]:
        _fake(tmp_path, name)
    found = {pathlib.Path(x.path).name: x.owner for x in find_temp_files(tmp_path)}
    assert found == dict.fromkeys(legacy, "unknown")
    assert reclaim_temp_files(tmp_path) == []


# ------------------------------------------------------------ TensorFlow's own ------
_TRACING_SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    from r2d2_agent.networks.policies import KerasPolicy
    from r2d2_agent.presets import cartpole_config
    from r2d2_agent.roles.builder import R2D2Builder

    config = cartpole_config(seed=0, enable_prev_action_reward=True)  # every custom layer
    R2D2Builder(config).make_learner().trace()
    KerasPolicy(config).step(np.zeros((1, 1, 4), np.float32), np.zeros((1, 2, 64), np.float32),
                             np.zeros(1, np.int32), np.zeros(1, np.float32))
    os._exit(0)  # as a killed process: no atexit handler runs
""")


def test_a_killed_learner_or_keras_actor_leaves_no_autograph_file(tmp_path):
    """AutoGraph writes each converted function to a file in the temp folder and removes
    it at exit: the network's layers and the acting and training graphs must not be
    converted, or every killed learner or Keras actor leaves files behind."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _TRACING_SCRIPT], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == []
