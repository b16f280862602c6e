"""The manager's multiprocessing folder, named after its owner.

Handing a `Connection` to a running child (the parent passes each new actor's pipe to the
learner, `ConnectActor`) goes through multiprocessing's resource sharer, which listens
on a Unix socket in the process's temp folder. Multiprocessing creates that folder as
`pymp-<random>` and removes it at a normal exit; a manager killed with SIGKILL leaves it
behind under a name no later run can attribute. So the manager creates the folder itself
before any child starts, as `r2d2mp_<owner tag>_<8 hex>` (`r2d2_agent.leftovers`), and
the next run removes a dead owner's (`reclaim_mp_folders`).

The socket's path must fit a Unix socket address (107 bytes on Linux): with the folder's
name (about 48 characters) and the socket's 17, a temp folder longer than 40 (a
`TMPDIR` deep in a job's scratch space) would not. The folder then goes to the first
writable one of `leftovers.MP_FOLDER_FALLBACK_DIRS` (`/tmp`) in which it fits: the
folders the next run looks in (`leftovers.mp_folder_dirs`).
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import multiprocessing.process
import multiprocessing.util
import os
import shutil
import sys
import tempfile

from r2d2_agent.leftovers import MP_FOLDER_PREFIX, mp_folder_dirs, segment_name

__all__ = ["use_owner_tagged_folder"]

logger = logging.getLogger(__name__)

# Bytes of a Unix socket's path: sun_path holds 108 with its NUL on Linux, 104 on macOS
_SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
_SOCKET_NAME = "listener-" + 8 * "x"  # multiprocessing's socket names in the folder


def _fits(base: str, name: str) -> bool:
    """Whether a socket in `base/name` has a path short enough to bind."""
    return len(os.fsencode(os.path.join(base, name, _SOCKET_NAME))) <= _SOCKET_PATH_MAX


def _folder_base(name: str) -> str:
    """The first of `mp_folder_dirs()` (the temp folder, then the fallbacks) that is
    writable and in which a socket fits: where the next run looks, too.

    Raises:
        OSError: if none is, naming the temp folder and the longest path that would do.
    """
    if "AF_UNIX" not in multiprocessing.connection.families:
        return tempfile.gettempdir()  # (Windows hands connections over named pipes)
    candidates = mp_folder_dirs()
    for base in candidates:
        if _fits(base, name) and os.access(base, os.W_OK | os.X_OK):
            if base != candidates[0]:
                logger.info(
                    "the temp folder %s is too long a path for a Unix socket; the "
                    "multiprocessing folder goes to %s",
                    candidates[0],
                    base,
                )
            return base
    temp = tempfile.gettempdir()
    longest = _SOCKET_PATH_MAX - len(os.fsencode(os.path.join("", name, _SOCKET_NAME))) - 1
    raise OSError(
        f"the temp folder {temp!r} ({len(os.fsencode(temp))} bytes) is too long a path for "
        f"the Unix socket multiprocessing makes in it, and none of {candidates[1:]} is a "
        f"writable folder: set TMPDIR to a folder of at most {longest} bytes"
    )


def use_owner_tagged_folder() -> str:
    """Makes an owner-tagged folder this process's multiprocessing temp folder, unless it
    already has one that exists (multiprocessing used it before: that folder is kept).
    One that was removed meanwhile (a temp cleaner in a long-lived notebook process) is
    replaced: multiprocessing would fail to create its socket there.

    Multiprocessing keeps the folder in the process's `_config["tempdir"]`, which is
    where `multiprocessing.util.get_temp_dir` looks first; the folder is removed at exit
    as multiprocessing's own is (a `Finalize` run by its exit handler).

    Returns:
        The process's multiprocessing temp folder.
    """
    config = multiprocessing.process.current_process()._config  # noqa: SLF001
    folder = config.get("tempdir")
    if folder is None or not os.path.isdir(folder):
        name = segment_name(MP_FOLDER_PREFIX)
        folder = os.path.join(_folder_base(name), name)
        os.mkdir(folder, 0o700)
        multiprocessing.util.Finalize(
            None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100
        )
        config["tempdir"] = folder
        logger.debug("multiprocessing temp folder %s", folder)
    return folder
