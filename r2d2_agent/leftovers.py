"""What a killed run leaves behind, named after its owner, and reclaimed once it is dead.

A run's temporary resources outlive a process killed with SIGKILL (an OOM kill, a
scheduler's `kill -9` of the whole process group, which takes Python's resource tracker
with it): its weights segment (a POSIX shared-memory object, `/dev/shm/<name>` on Linux:
RAM, about 15 MB at Atari size), any file being written (a temporary file beside it:
a checkpoint's is as large as the replay with `save_replay=True`) and the manager's
multiprocessing folder (the socket through which it hands actors' pipes to the learner;
multiprocessing would name it `pymp-<random>`, which no later run could attribute).
Every file the library writes whole (checkpoints, `save_weights` files, the run
directory's `run.json`, the learning-curve and state-discrepancy plots, the
state-discrepancy episodes and results, `r2d2-train`'s `result.json`) is written
through `atomic_write`: to a temp file in the same directory, renamed over the target
once complete, so the target is never partial. The segment's, the temp file's and the
folder's names carry their creator's *owner tag*, so that a later run can tell whether
it still lives:

    segment            /dev/shm/<prefix>_<tag>_<8 random hex>     e.g. r2d2_4242_81234567_…
    temp file          <dir>/.<target name>.<tag>.tmp           e.g. .ckpt-0000000100.h5.4242_…
    mp folder          <temp dir>/r2d2mp_<tag>_<8 random hex>    e.g. /tmp/r2d2mp_4242_…
                       (in /tmp if the temp dir's path is too long for a Unix socket)
    tag (Linux)        <pid>_<start>_<host><boot><pidns>
    tag (elsewhere)    <pid>

`start` is the process's start time in clock ticks after boot (field 22 of
`/proc/<pid>/stat`); `host`, `boot` and `pidns` are 6 hex digits each, from the hostname,
the kernel's boot id and the PID namespace. The owner of a tag is

* **alive** if `/proc/<pid>/stat` shows a live (not zombie) process with the same start
  time, on this machine, this boot, this PID namespace;
* **dead** if that process is gone, is a zombie, or the PID now belongs to a process that
  started at another time (a reused PID), or if the tag comes from an earlier boot of
  this machine (same hostname, other boot id: every process of that boot is gone);
* **unknown** otherwise: another machine (a checkpoint directory on a shared file system),
  another PID namespace (a container sharing `/dev/shm`), another user's file, a tag
  without a start time (written on another OS, or by an older r2d2-agent).

Only a dead owner's leftovers are removed automatically: `R2D2Manager.train` removes dead
runs' segments and multiprocessing folders before it creates its own;
`CheckpointCallback` removes dead writers' temp files from its directory when training
begins and whenever it prunes, `RunLogCallback` and `StateDiscrepancyCallback` from
theirs when training begins, and every `atomic_write` those of its own target before it
writes (the next `save_weights("w.h5")` removes the `.w.h5.<tag>.tmp` of a killed
earlier one). A live run's are never touched, however many runs share the machine.
Unknown ones are listed and only removed by hand, on request:

    python -m r2d2_agent.leftovers [DIR ...]             # list (DIR: run, checkpoint or
                                                         # weights dirs, searched)
    python -m r2d2_agent.leftovers --remove [DIR ...]    # remove the dead owners' ones
    python -m r2d2_agent.leftovers --remove --unknown    # also those whose owner is unknown

(`r2d2-leftovers` is the same command.) On systems without `/proc` (macOS, Windows) every
owner is unknown: nothing is removed automatically, and segments cannot be listed (POSIX
shared memory is not a directory there).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = [
    "SHM_DIR",
    "Leftover",
    "atomic_write",
    "find_mp_folders",
    "find_segments",
    "find_temp_files",
    "main",
    "mp_folder_dirs",
    "owner_status",
    "owner_tag",
    "reclaim_mp_folders",
    "reclaim_segments",
    "reclaim_temp_files",
    "remove_leftovers",
    "segment_name",
    "temp_path",
]

logger = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
"""Where Linux shows POSIX shared-memory objects as files."""

MP_FOLDER_PREFIX = "r2d2mp"
"""The name prefix of a manager's multiprocessing folder (in `mp_folder_dirs()`)."""

MP_FOLDER_FALLBACK_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")
"""Where a manager puts its multiprocessing folder when the temp folder's path is too long
for the Unix socket inside it (`TMPDIR` deep in a job's scratch space): the first of
these that is a writable folder short enough."""

ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"

_SCOPE_HEX = 6  # hex digits per scope part (host, boot, PID namespace)
_TAG = r"(?P<pid>\d+)(?:_(?P<start>\d+)_(?P<scope>[0-9a-f]{18}))?"
_SEGMENT_RE = re.compile(rf"^(?P<prefix>[A-Za-z0-9_]{{1,12}}?)_{_TAG}_(?P<rand>[0-9a-f]{{8}})$")
_TEMP_RE = re.compile(rf"^\.(?P<target>.+)\.{_TAG}\.tmp$")
_LEGACY_SEGMENT_PREFIXES = ("r2d2", "r2d2t")  # a tag-less segment name is ours only with these
_LEGACY_TEMP_RES = (  # temp files of versions that named them with the PID only
    re.compile(r"^\.(?P<target>.+\.(?:h5|hdf5))\.(?P<pid>\d+)\.tmp$"),  # checkpoints
    re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.tmp\.h5$"),  # save_weights
    re.compile(r"^(?P<target>.+\.json)\.(?P<pid>\d+)\.tmp$"),  # run.json, result.json
    re.compile(r"^(?P<target>.+\.(?:png|pdf|svg|jpe?g))\.(?P<pid>\d+)\.tmp\.png$"),  # plots
)


def _parse_temp(name: str) -> tuple[str, int, int | None, str | None] | None:
    """(target name, pid, start, scope) of one of our temp files' names, else None.

    A tagged name (`.<target>.<tag>.tmp`) is ours whatever its target; a name of an older
    version (PID only: its owner is unknown) only in the few forms those versions wrote.
    """
    match = _TEMP_RE.match(name)
    if match is not None and match["start"] is not None:
        return match["target"], int(match["pid"]), int(match["start"]), match["scope"]
    for legacy in _LEGACY_TEMP_RES:
        match = legacy.match(name)
        if match is not None:
            return match["target"], int(match["pid"]), None, None
    return None


# The owner tag ----------------------------------------------------------------------------


def _linux() -> bool:
    return sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:_SCOPE_HEX]


def _read_stat(pid: int | str) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of process `pid`, None if there is none.

    The command name (field 2) may hold spaces and parentheses: fields are counted after
    its last `)`.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime)


def _machine_scope() -> tuple[str, str, str]:
    """(host, boot, PID namespace) of this process, 6 hex digits each."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            boot = file.read().strip()
    except OSError:  # a sandbox without it: every boot looks the same (PIDs still checked)
        boot = ""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return _short_hash(socket.gethostname()), _short_hash(boot), _short_hash(namespace)


_OWN_TAG: dict[int, str] = {}


def owner_tag() -> str:
    """This process's owner tag: `<pid>_<start>_<scope>` on Linux, `<pid>` elsewhere."""
    pid = os.getpid()
    tag = _OWN_TAG.get(pid)
    if tag is None:
        stat = _read_stat("self") if _linux() else None
        tag = str(pid) if stat is None else f"{pid}_{stat[1]}_{''.join(_machine_scope())}"
        _OWN_TAG.clear()  # a forked child must not keep its parent's
        _OWN_TAG[pid] = tag
    return tag


def segment_name(prefix: str) -> str:
    """A new shared-memory segment name for this process: `<prefix>_<tag>_<8 hex>`."""
    return f"{prefix}_{owner_tag()}_{secrets.token_hex(4)}"


def temp_path(path: str | os.PathLike[str]) -> str:
    """The temporary file this process writes `path` to before renaming it:
    `<dir>/.<name>.<tag>.tmp`."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(directory, f".{name}.{owner_tag()}.tmp")


def _fsync_path(path: str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    except OSError:  # some file systems do not fsync directories; the rename still holds
        if not directory:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], durable: bool = False) -> Iterator[str]:
    """The one way the library writes a whole file: into an owner-tagged temp file beside
    it (`temp_path`), renamed over `path` once the body is done (atomic on POSIX).

    Readers see the previous file or the new one, never a part. If the body raises, the
    temp file is removed and `path` is untouched; if the process is killed (SIGKILL), the
    temp file stays, and its name tells a later run (or `r2d2-leftovers`) that its owner
    is dead. Before writing, the dead owners' temp files of the same target are removed.
    The directory is created if needed.

    Example::

        with atomic_write("runs/x/run.json") as tmp:
            with open(tmp, "w") as file:
                file.write(text)

    Args:
        path: The file to write (replaced if it exists).
        durable: Also fsync the file before the rename and the directory after it, so
            that the new file survives a power loss (checkpoints, weights).

    Yields:
        The temporary file to write; the body must close it before it ends.
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    reclaim_temp_files(directory, target=name)
    tmp = temp_path(path)
    try:
        yield tmp
        if durable:
            _fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            _fsync_path(directory, directory=True)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def owner_status(pid: int, start: int | None, scope: str | None) -> tuple[str, str]:
    """Whether the owner of a tag lives: (`"alive"`, `"dead"` or `"unknown"`, why).

    Args:
        pid: The owner's PID.
        start: Its start time in clock ticks after boot; None for a tag without one.
        scope: Its host, boot and PID-namespace hashes (18 hex digits); None without one.
    """
    if start is None or scope is None:
        return UNKNOWN, "the name holds no start time (another OS, or an older r2d2-agent)"
    if not _linux():
        return UNKNOWN, "no /proc on this system to check the owner"
    host, boot, namespace = _machine_scope()
    tag_host, tag_boot, tag_namespace = (scope[i : i + _SCOPE_HEX] for i in (0, 6, 12))
    if tag_host != host:
        return UNKNOWN, "written on another machine"
    if tag_boot != boot:
        return DEAD, f"process {pid} ran before this machine's last boot"
    if tag_namespace != namespace:
        return UNKNOWN, "written in another PID namespace (a container)"
    stat = _read_stat(pid)
    if stat is None:
        return DEAD, f"process {pid} is gone"
    state, started = stat
    if started != start:
        return DEAD, f"process {pid} is gone (the PID now belongs to a newer process)"
    if state in ("Z", "X"):
        return DEAD, f"process {pid} is a zombie"
    return ALIVE, f"process {pid} is running"


# Finding and removing ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Leftover:
    """A segment or temporary file and its owner.

    Attributes:
        kind: `"segment"` (shared memory), `"temp file"` (a file being written:
            checkpoint, weights, run log, plot, result) or `"mp folder"` (a manager's
            multiprocessing folder, removed with what it holds).
        path: Its file (`/dev/shm/<name>` for a segment) or folder.
        nbytes: Its size in bytes.
        pid: Its owner's PID.
        owner: `"alive"`, `"dead"` or `"unknown"` (see the module docstring).
        reason: Why, in words.
    """

    kind: str
    path: str
    nbytes: int
    pid: int
    owner: str
    reason: str


def _judge(kind: str, path: str, pid: int, start: int | None, scope: str | None) -> Leftover | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:  # removed meanwhile
        return None
    owner, reason = owner_status(pid, start, scope)
    if owner != ALIVE and hasattr(os, "getuid") and info.st_uid != os.getuid():
        owner, reason = UNKNOWN, f"another user's (uid {info.st_uid}); {reason}"
    return Leftover(kind, path, info.st_size, pid, owner, reason)


def find_segments(shm_dir: str = SHM_DIR) -> list[Leftover]:
    """r2d2-agent's shared-memory segments (every run's, live or not), sorted by path.

    Empty where POSIX shared memory is not a directory (macOS, Windows).
    """
    try:
        names = sorted(os.listdir(shm_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        match = _SEGMENT_RE.match(name)
        if match is None or (
            match["start"] is None and match["prefix"] not in _LEGACY_SEGMENT_PREFIXES
        ):
            continue
        start = None if match["start"] is None else int(match["start"])
        path = os.path.join(shm_dir, name)
        leftover = _judge("segment", path, int(match["pid"]), start, match["scope"])
        if leftover is not None:
            found.append(leftover)
    return found


def mp_folder_dirs() -> list[str]:
    """The folders a manager's multiprocessing folder can be in: `tempfile.gettempdir()`,
    then those of `MP_FOLDER_FALLBACK_DIRS` that exist (each folder once)."""
    dirs: dict[str, str] = {}  # real path -> as named
    for directory in (tempfile.gettempdir(), *MP_FOLDER_FALLBACK_DIRS):
        if os.path.isdir(directory):
            dirs.setdefault(os.path.realpath(directory), directory)
    return list(dirs.values())


def find_mp_folders(temp_dir: str | None = None) -> list[Leftover]:
    """Managers' multiprocessing folders (`r2d2mp_<tag>_<8 hex>`, every run's, live or
    not) in `temp_dir` (default: each of `mp_folder_dirs()`), sorted by path."""
    if temp_dir is None:
        found = [x for d in mp_folder_dirs() for x in find_mp_folders(d)]
        return sorted(found, key=lambda x: x.path)
    found = []
    for name in sorted(os.listdir(temp_dir)):
        match = _SEGMENT_RE.match(name)
        path = os.path.join(temp_dir, name)
        if match is None or match["prefix"] != MP_FOLDER_PREFIX or match["start"] is None:
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        leftover = _judge("mp folder", path, int(match["pid"]), int(match["start"]), match["scope"])
        if leftover is not None:
            found.append(leftover)
    return found


def find_temp_files(
    directory: str | os.PathLike[str], recursive: bool = False, target: str | None = None
) -> list[Leftover]:
    """The temp files of `atomic_write` (`.<name>.<tag>.tmp`, and the PID-only names of
    older versions) in `directory` (and below it if `recursive`), sorted by path; empty if
    the directory does not exist.

    Args:
        directory: Where to look.
        recursive: Also in its subdirectories.
        target: Only the temp files of this file name (e.g. `"run.json"`).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    walk = os.walk(directory) if recursive else [(directory, [], os.listdir(directory))]
    found = []
    for folder, _, names in walk:
        for name in names:
            parsed = _parse_temp(name)
            if parsed is None or (target is not None and parsed[0] != target):
                continue
            leftover = _judge("temp file", os.path.join(folder, name), *parsed[1:])
            if leftover is not None:
                found.append(leftover)
    return sorted(found, key=lambda leftover: leftover.path)


def remove_leftovers(
    leftovers: Iterable[Leftover], include_unknown: bool = False
) -> list[Leftover]:
    """Removes the leftovers whose owner is dead (and unknown ones if `include_unknown`);
    never a live owner's. Returns those removed (one removed meanwhile by someone else is
    not counted; one this user may not remove is logged and kept)."""
    removed = []
    for leftover in leftovers:
        if leftover.owner == ALIVE or (leftover.owner == UNKNOWN and not include_unknown):
            continue
        try:
            if leftover.kind == "mp folder":
                shutil.rmtree(leftover.path)
            else:
                os.unlink(leftover.path)
        except FileNotFoundError:
            continue
        except PermissionError as exc:
            logger.warning("cannot remove %s: %s", leftover.path, exc)
            continue
        removed.append(leftover)
    return removed


def _log_removed(removed: Sequence[Leftover]) -> None:
    for leftover in removed:
        logger.warning(
            "removed the %s %s (%.1f MB) that a killed run left behind: %s",
            leftover.kind,
            leftover.path,
            leftover.nbytes / 1e6,
            leftover.reason,
        )


def _reclaim(find: Callable[[], list[Leftover]], where: str) -> list[Leftover]:
    """Removes what `find` finds of dead owners, logging each; a failure to look (a file
    system that refuses) is logged and never stops the caller's run."""
    try:
        removed = remove_leftovers(find())
    except (OSError, ValueError) as exc:
        logger.warning("could not look for leftovers of killed runs in %s: %s", where, exc)
        return []
    _log_removed(removed)
    return removed


def reclaim_segments(shm_dir: str = SHM_DIR) -> list[Leftover]:
    """Removes the shared-memory segments of dead owners (logged); returns them."""
    return _reclaim(lambda: find_segments(shm_dir), shm_dir)


def reclaim_mp_folders(temp_dir: str | None = None) -> list[Leftover]:
    """Removes the multiprocessing folders of dead managers (logged); returns them."""
    where = temp_dir or ", ".join(mp_folder_dirs())
    return _reclaim(lambda: find_mp_folders(temp_dir), where)


def reclaim_temp_files(
    directory: str | os.PathLike[str], target: str | None = None
) -> list[Leftover]:
    """Removes the temp files of dead writers in `directory` (only those of file name
    `target` if given; logged); returns them."""
    return _reclaim(lambda: find_temp_files(directory, target=target), os.fspath(directory))


# The command ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m r2d2_agent.leftovers`: lists (and with `--remove` removes) leftovers."""
    parser = argparse.ArgumentParser(
        prog="r2d2-leftovers",
        description="List r2d2-agent's shared-memory segments, its managers' "
        "multiprocessing folders and the temp files of its interrupted writes (checkpoints, "
        "weights, run logs, plots, results), with their owners (alive, dead or unknown); "
        "remove the dead owners' ones.",
    )
    parser.add_argument(
        "directories",
        nargs="*",
        metavar="DIR",
        help="run, checkpoint or weights directories to search (recursively) for temp files",
    )
    parser.add_argument("--remove", action="store_true", help="remove those of dead owners")
    parser.add_argument(
        "--unknown",
        action="store_true",
        help="with --remove, also those whose owner cannot be checked (another machine, "
        "container or user, an older name): only if no run there uses them",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.unknown and not args.remove:
        parser.error("--unknown only goes with --remove")
    for directory in args.directories:
        if not os.path.isdir(directory):
            parser.error(f"{directory!r} is not a directory")
    found = find_segments() + find_mp_folders()
    for directory in args.directories:
        found += find_temp_files(directory, recursive=True)
    removed = remove_leftovers(found, args.unknown) if args.remove else []
    gone = {leftover.path for leftover in removed}
    if args.json:
        rows = [{**dataclasses.asdict(x), "removed": x.path in gone} for x in found]
        print(json.dumps(rows, indent=1))
        return 0
    for leftover in found:
        mark = "removed" if leftover.path in gone else leftover.owner
        print(
            f"{mark:8} {leftover.kind:9} {leftover.nbytes / 1e6:10.1f} MB  {leftover.path}"
            f"  ({leftover.reason})"
        )
    where = ", ".join([SHM_DIR, *mp_folder_dirs(), *args.directories])
    print(f"{len(found)} found ({where}), {len(removed)} removed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
