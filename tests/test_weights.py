"""Tests of `r2d2_agent.distributed.mp.shared_weights`: shared-memory weights with a seqlock.

Every test must leave no segment and no child process behind (`no_leftovers`); the tests
that start a subprocess run it once in a module-scoped fixture that cleans up before its
tests run.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pytest

from r2d2_agent.distributed.mp.shared_weights import SharedWeights, SharedWeightsHandle, WeightsSpec

pytestmark = pytest.mark.usefixtures("no_leftovers")

PREFIX = "r2d2t"  # segments made by these tests: /dev/shm/r2d2t_<pid>_<hex>
HAS_DEV_SHM = os.path.isdir("/dev/shm")
needs_dev_shm = pytest.mark.skipif(not HAS_DEV_SHM, reason="needs Linux /dev/shm")


def _shm_exists(name: str) -> bool:
    return os.path.exists(os.path.join("/dev/shm", name))


def _arrays(value: float = 0.0) -> list[np.ndarray]:
    return [
        np.full((3, 4), value, np.float32),
        np.full((5,), value, np.float64),
        np.full((2, 2, 2), value, np.int32),
        np.full((), value, np.float32),
    ]


def _create(spec: WeightsSpec | None = None) -> SharedWeights:
    return SharedWeights.create(spec or WeightsSpec.from_arrays(_arrays()), name_prefix=PREFIX)


# ------------------------------------------------------------------------- spec -----
def test_spec_from_arrays_records_shapes_and_dtypes():
    spec = WeightsSpec.from_arrays(_arrays())
    assert spec.shapes == ((3, 4), (5,), (2, 2, 2), ())
    assert spec.dtypes == ("<f4", "<f8", "<i4", "<f4")


def test_spec_nbytes_is_the_size_of_all_arrays():
    assert WeightsSpec.from_arrays(_arrays()).nbytes == 12 * 4 + 5 * 8 + 8 * 4 + 4


def test_spec_pickles_to_an_equal_spec():
    spec = WeightsSpec.from_arrays(_arrays())
    assert pickle.loads(pickle.dumps(spec)) == spec


# ---------------------------------------------------------------- publish / read ----
def _random_arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(a.shape).astype(a.dtype) for a in _arrays()]


def test_publish_then_read_round_trips_the_arrays():
    src = _random_arrays()
    with _create(WeightsSpec.from_arrays(src)) as sw:
        assert sw.publish(src) == 1
        version, got = sw.read()
        assert version == 1 and sw.version() == 1
        for a, b in zip(src, got, strict=True):
            assert b.dtype == a.dtype and b.shape == a.shape
            np.testing.assert_array_equal(b, a)


def test_read_returns_a_copy_of_the_segment():
    src = _random_arrays()
    with _create(WeightsSpec.from_arrays(src)) as sw:
        sw.publish(src)
        _, got = sw.read()
        got[0][...] = 42
        np.testing.assert_array_equal(sw.read()[1][0], src[0])


def test_each_publish_increments_the_version():
    with _create() as sw:
        assert sw.publish(_arrays(1.0)) == 1
        assert sw.publish(_arrays(2.0)) == 2
        assert sw.version() == 2


def test_read_into_preallocated_out_reuses_arrays():
    spec = WeightsSpec.from_arrays(_arrays())
    with _create(spec) as sw:
        sw.publish(_arrays(3.0))
        out = spec.allocate()
        ids = [id(a) for a in out]
        version, got = sw.read(out=out)
        assert version == 1 and got is out and [id(a) for a in got] == ids
        assert all((a == 3).all() for a in out)


def test_read_rejects_an_out_array_not_matching_the_spec():
    spec = WeightsSpec.from_arrays(_arrays())
    with _create(spec) as sw:
        sw.publish(_arrays(3.0))
        out = spec.allocate()
        with pytest.raises(ValueError, match=r"out\[1\]"):
            sw.read(out=[out[0], np.zeros(4), out[2], out[3]])


def test_read_before_publish_is_version_zero_and_zeros():
    with _create(WeightsSpec.from_arrays(_arrays(7.0))) as sw:
        version, got = sw.read()
        assert version == 0 and sw.version() == 0
        assert all(a.shape == b.shape and not a.any() for a, b in zip(got, _arrays(), strict=True))


def test_read_if_newer_returns_only_a_newer_version():
    with _create() as sw:
        assert sw.read_if_newer(0) is None
        sw.publish(_arrays(1.0))
        version, got = sw.read_if_newer(0)
        assert version == 1 and got[1][0] == 1.0
        assert sw.read_if_newer(1) is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda a: a[:3], r"expected 4 arrays, got 3"),
        (lambda a: a[:1] + [np.zeros(6)] + a[2:], r"arrays\[1\]: expected shape \(5,\).*\(6,\)"),
        (lambda a: a[:2] + [a[2].astype(np.int64)] + a[3:], r"arrays\[2\]: .*int32.*got .*int64"),
    ],
    ids=["count", "shape", "dtype"],
)
def test_publish_rejects_mismatch(bad, message):
    with _create() as sw:
        with pytest.raises(ValueError, match=message):
            sw.publish(bad(_arrays()))
        assert sw.version() == 0  # nothing half-published


# ---------------------------------------------------------------- readers -----------
def test_handle_pickles_to_a_handle():
    with _create() as sw:
        assert isinstance(pickle.loads(pickle.dumps(sw.handle)), SharedWeightsHandle)


def test_reader_cannot_publish():
    with _create() as sw:
        with SharedWeights.attach(pickle.loads(pickle.dumps(sw.handle))) as reader:
            with pytest.raises(RuntimeError, match="read-only"):
                reader.publish(_arrays())


def test_reader_cannot_unlink():
    with _create() as sw:
        with SharedWeights.attach(pickle.loads(pickle.dumps(sw.handle))) as reader:
            with pytest.raises(RuntimeError, match="owner"):
                reader.unlink()


def _die_mid_publish(sw: SharedWeights) -> None:
    sw._header[0] += 1  # white-box: counter left odd, as by a writer killed mid-copy


def test_read_times_out_when_writer_died_mid_publish():
    with _create() as sw:
        _die_mid_publish(sw)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="consistent snapshot"):
            sw.read(timeout=0.1)
        assert time.monotonic() - t0 < 2.0


def test_next_publish_recovers_from_a_writer_that_died_mid_publish():
    with _create() as sw:
        _die_mid_publish(sw)
        with pytest.raises(TimeoutError):
            sw.read(timeout=0.1)
        assert sw.publish(_arrays(1.0)) == 1
        assert sw.read()[0] == 1


def test_dropped_reader_closes_without_unraisable_error(monkeypatch):
    errors = []
    monkeypatch.setattr(sys, "unraisablehook", errors.append)
    with _create() as sw:
        reader = SharedWeights.attach(sw.handle)
        reader.read()
        del reader
        gc.collect()
    assert errors == []


# ---------------------------------------------------------------- segment lifetime --
@needs_dev_shm
def test_segment_is_named_by_prefix_and_pid():
    with _create() as sw:
        assert sw.name.startswith(f"{PREFIX}_{os.getpid()}_") and _shm_exists(sw.name)


@needs_dev_shm
def test_unlink_removes_the_segment():
    sw = _create()
    sw.unlink()
    assert not _shm_exists(sw.name)
    sw.close()


@needs_dev_shm
def test_unlink_and_close_are_idempotent():
    sw = _create()
    sw.unlink()
    sw.unlink()
    sw.close()
    sw.close()


@needs_dev_shm
def test_dropped_owner_is_unlinked_by_finalizer():
    sw = _create()
    name = sw.name
    del sw
    gc.collect()
    assert not _shm_exists(name)


_EXIT_WITHOUT_UNLINK = """
import numpy as np
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec
KEEP = SharedWeights.create(WeightsSpec.from_arrays([np.ones(3)]), name_prefix="r2d2t")
KEEP.publish([np.ones(3)])
print(KEEP.name)
"""


@pytest.fixture(scope="module")
def owner_exited_without_unlink():
    """A subprocess that creates a segment and exits without unlinking it."""
    return subprocess.run(
        [sys.executable, "-c", _EXIT_WITHOUT_UNLINK], capture_output=True, timeout=120
    )


@needs_dev_shm
def test_owner_exiting_without_unlink_is_cleaned_at_exit(owner_exited_without_unlink):
    """The weakref.finalize safety net unlinks at interpreter exit."""
    res = owner_exited_without_unlink
    assert res.returncode == 0, res.stderr.decode()
    assert not _shm_exists(res.stdout.decode().strip())


@needs_dev_shm
def test_owner_exiting_without_unlink_makes_no_resource_tracker_noise(
    owner_exited_without_unlink,
):
    assert owner_exited_without_unlink.stderr.decode() == ""


@pytest.mark.skipif(not hasattr(os, "fork") or not HAS_DEV_SHM, reason="needs fork, /dev/shm")
def test_forked_child_does_not_run_owner_finalizer():
    with _create() as sw:
        pid = os.fork()
        if pid == 0:  # child: runs the owner's finalizer, which must do nothing here
            try:
                sw._finalizer()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert _shm_exists(sw.name)


# ---------------------------------------------------------------- concurrency -------
def _torn_read_writer(
    handle: SharedWeightsHandle, seconds: float, min_publishes: int = 200
) -> None:
    """Spawn child: publishes arrays all filled with the version they will get, for
    `seconds` and at least `min_publishes` times (so a loaded machine still overlaps
    reads and writes)."""
    writer = SharedWeights.attach(handle, writer=True)
    arrays = handle.spec.allocate()
    end = time.monotonic() + seconds
    while time.monotonic() < end or writer.version() < min_publishes:
        version = writer.version() + 1
        for a in arrays:
            a.fill(version)
        if writer.publish(arrays) != version:
            raise AssertionError("unexpected version")
        time.sleep(0.001)  # a learner pauses between publishes; readers get a window
    writer.close()


def test_no_torn_reads():
    """The reader must never get arrays that disagree with the version it returns."""
    spec = WeightsSpec(((512, 1024), (128, 1024), (256, 1024), (7,)), ("<f4", "<f8", "<i4", "<i8"))
    ctx = multiprocessing.get_context("spawn")
    with _create(spec) as sw:
        child = ctx.Process(target=_torn_read_writer, args=(sw.handle, 1.5))
        child.start()
        try:
            out, reads, versions = spec.allocate(), 0, set()
            deadline = time.monotonic() + 60
            while sw.version() == 0 and child.is_alive() and time.monotonic() < deadline:
                time.sleep(0.001)
            while child.is_alive() and time.monotonic() < deadline:
                version, got = sw.read(out=out, timeout=5.0)
                for i, a in enumerate(got):
                    if (a != version).any():
                        pytest.fail(
                            f"torn read: version {version} but array {i} holds "
                            f"values {np.unique(a)[:5]}"
                        )
                reads += 1
                versions.add(version)
        finally:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
        assert child.exitcode == 0
        assert reads >= 10 and len(versions) >= 5, (reads, len(versions))


# ---------------------------------------------------------------- other processes ---
_ATTACH_CHILD = """
import pickle, sys
from r2d2_agent.distributed.mp.shared_weights import SharedWeights
with SharedWeights.attach(pickle.loads(sys.stdin.buffer.read())) as w:
    version, arrays = w.read()
print(version, float(arrays[1].sum()))
"""


@pytest.fixture(scope="module")
def foreign_attach(assert_no_leftovers):
    """A plain subprocess (its own resource tracker) attaches to a published segment,
    reads it and exits; then whether the segment still exists and what its owner reads."""
    with _create() as sw:
        sw.publish(_arrays(2.0))
        res = subprocess.run(
            [sys.executable, "-c", _ATTACH_CHILD],
            input=pickle.dumps(sw.handle),
            capture_output=True,
            timeout=120,
        )
        run = SimpleNamespace(
            result=res, segment_exists=_shm_exists(sw.name), owner_version=sw.read()[0]
        )
    assert_no_leftovers()
    return run


@needs_dev_shm
def test_foreign_process_attach_reads_the_published_weights(foreign_attach):
    res = foreign_attach.result
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode().split() == ["1", "10.0"]


@needs_dev_shm
def test_foreign_process_attach_does_not_unlink(foreign_attach):
    assert foreign_attach.segment_exists
    assert foreign_attach.owner_version == 1


@needs_dev_shm
def test_foreign_process_attach_makes_no_resource_tracker_noise(foreign_attach):
    assert foreign_attach.result.stderr.decode() == ""


_SPAWN_SCRIPT = """
import multiprocessing, os, sys
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec
import numpy as np

def child(handle):
    with SharedWeights.attach(handle) as w:
        assert w.read()[0] == 1

if __name__ == "__main__":
    sw = SharedWeights.create(WeightsSpec.from_arrays([np.ones(3)]), name_prefix="r2d2t")
    sw.publish([np.ones(3)])
    p = multiprocessing.get_context("spawn").Process(target=child, args=(sw.handle,))
    p.start(); p.join()
    assert p.exitcode == 0, p.exitcode
    assert os.path.exists("/dev/shm/" + sw.name), "child unlinked the segment"
    assert sw.read()[0] == 1
    sw.close(); sw.unlink()
    assert not os.path.exists("/dev/shm/" + sw.name)
    print("ok")
"""


@pytest.fixture(scope="module")
def spawn_child_attach(tmp_path_factory):
    """A script whose spawn child (sharing its resource tracker) attaches and reads, then
    the script checks the segment is still there and unlinks it."""
    script = tmp_path_factory.mktemp("spawn_attach") / "spawn_attach.py"
    script.write_text(textwrap.dedent(_SPAWN_SCRIPT))
    return subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120)


@needs_dev_shm
def test_spawn_child_attach_leaves_the_segment_to_its_owner(spawn_child_attach):
    res = spawn_child_attach
    assert res.returncode == 0 and res.stdout.decode().strip() == "ok", res.stderr.decode()


@needs_dev_shm
def test_spawn_child_attach_makes_no_resource_tracker_noise(spawn_child_attach):
    # The tracker inherits this stderr: a KeyError or "leaked" warning would show here.
    err = spawn_child_attach.stderr.decode()
    assert err == "", err
