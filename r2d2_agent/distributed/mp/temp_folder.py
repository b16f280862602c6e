"""The manager's multiprocessing folder, named after its owner.

Handing a `Connection` to a running child (the parent passes each new actor's pipe to the
learner, `ConnectActor`) goes through multiprocessing's resource sharer, which listens
on a Unix socket in the process's temp folder. Multiprocessing creates that folder as
`pymp-<random>` and removes it at a normal exit; a manager killed with SIGKILL leaves it
behind under a name no later run can attribute. So the manager creates the folder itself
before any child starts, as `r2d2mp_<owner tag>_<8 hex>` (`r2d2_agent.leftovers`), and
the next run removes a dead owner's (`reclaim_mp_folders`).
"""

from __future__ import annotations

import logging
import multiprocessing.process
import multiprocessing.util
import os
import shutil
import tempfile

from r2d2_agent.leftovers import MP_FOLDER_PREFIX, segment_name

__all__ = ["use_owner_tagged_folder"]

logger = logging.getLogger(__name__)


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
        folder = os.path.join(tempfile.gettempdir(), segment_name(MP_FOLDER_PREFIX))
        os.mkdir(folder, 0o700)
        multiprocessing.util.Finalize(
            None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100
        )
        config["tempdir"] = folder
        logger.debug("multiprocessing temp folder %s", folder)
    return folder
