"""Network weights shared by one writer (learner) and many readers (actors).

Segment layout: 64-byte header (uint64 word 0 = seqlock counter, word 1 = magic), then
the arrays, each 64-byte aligned. Seqlock: the writer makes the counter odd, copies, makes
it even (`version == counter // 2`); a reader loads the counter, copies, re-loads it and
keeps the copy only if both loads are equal and even, else retries (bounded by a timeout).

Memory ordering. A seqlock is sound when (writer) the odd counter is visible before any
payload store and every payload store before the even counter, and (reader) the payload
loads happen after the first counter load and before the second. x86 keeps stores in
order with stores and loads with loads, but weakly ordered CPUs (ARM: Apple silicon,
Graviton; POWER; RISC-V) may reorder them, so both sides put a full memory barrier
(`memory_barrier`) between the counter and the payload, in each direction. Counter
accesses are aligned 8-byte loads and stores, single-copy atomic on every 64-bit CPU.

Python has no fence primitive; `memory_barrier` releases and re-acquires a lock private to
the calling thread. Uncontended, that is one atomic read-modify-write with release
semantics followed in program order by one with acquire semantics (glibc's `sem_post` /
`sem_wait` under CPython 3.10-3.12's locks, sequentially consistent compare-and-swaps
under 3.13's `PyMutex`). On every architecture CPython runs on, a release followed by an
acquire orders all memory accesses before it before all accesses after it: the release
keeps earlier accesses above it, the acquire keeps later ones below it, and the pair is
not reordered (x86: locked instructions are full barriers; ARMv8: a store-release is
ordered before a later load-acquire, RCsc; POWER: the release's `lwsync` orders earlier
stores and loads before later ones; RISC-V: the release's `fence rw,w` and the acquire's
`fence r,rw`). It costs well under a microsecond (`benchmarks/bench_weights.py`).
`tests/test_weights.py` checks where the barriers sit and, empirically, that no torn
snapshot is ever kept.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from r2d2_agent.leftovers import segment_name

logger = logging.getLogger(__name__)

_HEADER_BYTES = _ALIGN = 64
_MAGIC = 0x5232_4432_5745_4954  # "R2D2WEIT"
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_]{1,12}$")
_ATTACH_LOCK = threading.Lock()


_BARRIER = threading.local()


def memory_barrier() -> None:
    """A full memory fence for the calling thread (see the module docstring).

    Releases and re-acquires a lock that only this thread holds, which executes a
    release then an acquire atomic operation: no memory access moves across the pair.
    """
    lock = getattr(_BARRIER, "lock", None)
    if lock is None:
        lock = _BARRIER.lock = threading.Lock()
        lock.acquire()
    lock.release()
    lock.acquire()


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class WeightsSpec:
    """Immutable, picklable description of a list of arrays.

    Attributes:
        shapes: One shape tuple per array.
        dtypes: One numpy dtype string per array (e.g. `"<f4"`).
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.dtypes):
            raise ValueError(f"{len(self.shapes)} shapes but {len(self.dtypes)} dtypes")
        if any(np.dtype(d).hasobject for d in self.dtypes):
            raise ValueError("object dtypes cannot live in shared memory")

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> WeightsSpec:
        """Builds the spec of `arrays` (e.g. `model.get_weights()`)."""
        arrs = [np.asarray(a) for a in arrays]
        return cls(tuple(tuple(map(int, a.shape)) for a in arrs), tuple(a.dtype.str for a in arrs))

    @property
    def nbytes(self) -> int:
        """Total bytes of the arrays (without header or alignment padding)."""
        return sum(self._sizes())

    def _sizes(self) -> list[int]:
        return [
            int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize
            for s, d in zip(self.shapes, self.dtypes, strict=True)
        ]

    def offsets(self) -> list[int]:
        """Byte offset of each array inside the segment (64-byte aligned)."""
        out, pos = [], _HEADER_BYTES
        for size in self._sizes():
            out.append(pos)
            pos = _align(pos + size)
        return out

    @property
    def segment_size(self) -> int:
        """Bytes of shared memory needed (header + aligned arrays, at least 1 page)."""
        return max(_align(_HEADER_BYTES + sum(_align(n) for n in self._sizes())), 4096)

    def allocate(self) -> list[np.ndarray]:
        """Returns new zeroed arrays matching the spec (e.g. for `read(out=...)`)."""
        return [np.zeros(s, dtype=d) for s, d in zip(self.shapes, self.dtypes, strict=True)]

    def check(self, arrays: Sequence[np.ndarray], what: str = "arrays") -> None:
        """Raises ValueError naming index, expected and got unless `arrays` match exactly."""
        if len(arrays) != len(self.shapes):
            raise ValueError(f"{what}: expected {len(self.shapes)} arrays, got {len(arrays)}")
        for i, (a, s, d) in enumerate(zip(arrays, self.shapes, self.dtypes, strict=True)):
            shape, dtype = tuple(np.shape(a)), getattr(a, "dtype", None)
            if shape != s or dtype != np.dtype(d):
                raise ValueError(
                    f"{what}[{i}]: expected shape {s} dtype {np.dtype(d)}, "
                    f"got shape {shape} dtype {dtype}"
                )


@dataclass(frozen=True)
class SharedWeightsHandle:
    """Picklable reference to a segment: pass it to a child, then `SharedWeights.attach`."""

    name: str
    spec: WeightsSpec


def _unlink_segment(shm: shared_memory.SharedMemory, creator_pid: int) -> None:
    """Owner finalizer: removes the segment name (runs at most once, never in a fork)."""
    if os.getpid() != creator_pid:
        return
    try:
        shm.unlink()  # also unregisters it from the resource tracker
        logger.debug("unlinked shared weights segment %s", shm.name)
    except FileNotFoundError:
        logger.warning("shared weights segment %s was already unlinked by someone else", shm.name)
        resource_tracker.unregister(shm._name, "shared_memory")


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Opens an existing segment WITHOUT registering it with the resource tracker.

    Python < 3.13 registers attached segments too. In a process with its own tracker
    (not started by multiprocessing) that tracker unlinks the segment at exit, with a
    "leaked shared_memory" warning, killing the owner's segment. The usual fix,
    `resource_tracker.unregister` after attach, is wrong for spawn/fork children: they
    share the parent's tracker, which keeps a *set* of names, so the child's unregister
    drops the owner's entry (no crash cleanup any more) and the owner's own unregister
    later prints a KeyError traceback from the tracker. So readers never register:
    `track=False` on 3.13+, else a no-op `register` while the constructor runs.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    with _ATTACH_LOCK:
        original = resource_tracker.register
        resource_tracker.register = lambda n, t: None if t == "shared_memory" else original(n, t)
        try:
            return shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = original


class SharedWeights:
    """Weights in shared memory: one writer, many lock-free seqlock readers.

    `create` makes the owner (writes, unlinks); `attach` makes a reader, or the writer
    with `writer=True` when the learner is not the creator. One writer at a time.
    """

    def __init__(
        self, shm: shared_memory.SharedMemory, spec: WeightsSpec, *, owner: bool, writer: bool
    ) -> None:
        """Internal: use `create` or `attach`."""
        self._shm: shared_memory.SharedMemory | None = shm
        self.name: str = shm.name  # segment name, without the leading slash
        self.spec = self._spec = spec
        self._owner, self._writer = owner, writer
        self._header = np.ndarray((_HEADER_BYTES // 8,), dtype=np.uint64, buffer=shm.buf)
        layout = zip(spec.shapes, spec.dtypes, spec.offsets(), strict=True)
        self._views = [np.ndarray(s, dtype=d, buffer=shm.buf, offset=o) for s, d, o in layout]
        pid = os.getpid()
        self._finalizer = weakref.finalize(self, _unlink_segment, shm, pid) if owner else None

    @classmethod
    def create(cls, spec: WeightsSpec, name_prefix: str = "r2d2") -> SharedWeights:
        """Creates a zeroed segment named `{prefix}_{owner tag}_{hex}`. The caller owns it.

        The owner tag (`r2d2_agent.leftovers.owner_tag`: PID and start time on Linux) lets
        a later run remove the segment if this process is killed before it can.
        """
        if not _PREFIX_RE.match(name_prefix):
            raise ValueError(f"name_prefix must match {_PREFIX_RE.pattern}, got {name_prefix!r}")
        name = segment_name(name_prefix)
        shm = shared_memory.SharedMemory(name=name, create=True, size=spec.segment_size)
        np.ndarray((shm.size,), dtype=np.uint8, buffer=shm.buf)[:] = 0
        self = cls(shm, spec, owner=True, writer=True)
        self._header[1] = _MAGIC
        logger.debug("created shared weights segment %s (%d bytes)", name, shm.size)
        return self

    @classmethod
    def attach(cls, handle: SharedWeightsHandle, *, writer: bool = False) -> SharedWeights:
        """Attaches to the segment of `handle`; `writer=True` allows `publish`.

        An attached instance never unlinks and is never registered with the resource
        tracker, so a child exiting leaves the segment alone and warns about nothing.
        """
        shm = _attach_untracked(handle.name)
        magic = int(np.frombuffer(shm.buf, dtype=np.uint64, count=2)[1]) if shm.size >= 16 else 0
        if shm.size < handle.spec.segment_size or magic != _MAGIC:
            shm.close()
            raise ValueError(
                f"segment {handle.name!r} is not a SharedWeights segment of "
                f"{handle.spec.segment_size} bytes (size {shm.size})"
            )
        return cls(shm, handle.spec, owner=False, writer=writer)

    @property
    def handle(self) -> SharedWeightsHandle:
        """Small picklable object that children pass to `attach`."""
        return SharedWeightsHandle(self.name, self._spec)

    def version(self) -> int:
        """Latest completely published version (0 = nothing yet). No copy, no lock."""
        if self._shm is None:
            raise RuntimeError(f"SharedWeights {self.name!r} is closed")
        return int(self._header[0]) >> 1

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """Copies `arrays` into the segment and returns the new version (1, 2, ...).

        Raises:
            RuntimeError: Not the writer, or closed.
            ValueError: Arrays do not match the spec (count, shape, dtype).
        """
        if self._shm is None:
            raise RuntimeError(f"SharedWeights {self.name!r} is closed")
        if not self._writer:
            raise RuntimeError("publish() on a read-only SharedWeights (attach writer=True)")
        self._spec.check(arrays)
        seq = int(self._header[0])
        odd = seq if seq & 1 else seq + 1  # odd already: a previous writer died mid-write
        self._header[0] = odd  # readers now retry
        memory_barrier()  # the odd counter is visible before any payload store
        for dst, src in zip(self._views, arrays, strict=True):
            np.copyto(dst, src)
        memory_barrier()  # every payload store is visible before the even counter
        self._header[0] = odd + 1
        return (odd + 1) >> 1

    def read(
        self, out: list[np.ndarray] | None = None, timeout: float = 1.0
    ) -> tuple[int, list[np.ndarray]]:
        """Returns `(version, arrays)`: a consistent copy, never half-written.

        Before any publish the version is 0 and the arrays are all zeros.

        Args:
            out: Preallocated arrays matching the spec (filled in place, no allocation).
            timeout: Seconds to keep retrying while the writer is mid-publish.

        Raises:
            TimeoutError: No consistent snapshot within `timeout` (writer died mid-write).
        """
        if self._shm is None:
            raise RuntimeError(f"SharedWeights {self.name!r} is closed")
        out = self._spec.allocate() if out is None else out
        self._spec.check(out, what="out")
        header, attempts, deadline = self._header, 0, None
        while True:
            before = int(header[0])
            if not before & 1:
                memory_barrier()  # the payload loads come after the first counter load
                for dst, src in zip(out, self._views, strict=True):
                    np.copyto(dst, src)
                memory_barrier()  # ... and before the second one
                if int(header[0]) == before:
                    return before >> 1, out
            attempts += 1
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            elif now > deadline:
                raise TimeoutError(
                    f"no consistent snapshot of shared weights {self.name!r} after {attempts} "
                    f"tries in {timeout:.3g} s; counter={int(header[0])} (odd = writer died "
                    "mid-publish?)"
                )
            if attempts > 4:
                time.sleep(50e-6)  # let the writer finish instead of spinning

    def read_if_newer(
        self, last_version: int, out: list[np.ndarray] | None = None, timeout: float = 1.0
    ) -> tuple[int, list[np.ndarray]] | None:
        """Like `read` but returns None (no copy) if `version() <= last_version`."""
        if self.version() <= last_version:
            return None
        return self.read(out, timeout)

    def close(self) -> None:
        """Detaches this process's mapping (idempotent). Does not unlink."""
        if self._shm is None:
            return
        self._header = self._views = None  # type: ignore[assignment]
        shm, self._shm = self._shm, None
        shm.close()

    def unlink(self) -> None:
        """Owner only: removes the segment name (idempotent). Mappings stay valid."""
        if self._finalizer is None:
            raise RuntimeError("unlink() is reserved to the owner that created the segment")
        self._finalizer()

    def __enter__(self) -> SharedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._owner:
            self.unlink()

    def __del__(self) -> None:  # drop views so SharedMemory.__del__ closes w/o BufferError
        self._header = self._views = None  # type: ignore[assignment]
