"""The Ray backend of `R2D2Manager` (`backend="ray"`): actors and the learner as Ray actors.

* `options`: `RayOptions`, the backend's settings (validated without importing Ray).
* `board`: `RunBoard`, the run's coordinator actor (stop flag, counters, latest weights).
* `channels`: the four transport interfaces over Ray (object store, actor calls).
* `workers`: the actor and learner Ray actors, running the same loops as multiprocessing.
* `supervisor`: `RaySupervisor`, one `train` call on a Ray cluster.

Ray is an optional dependency (`pip install "r2d2-agent[ray]"`); only `options` and this
module import without it.
"""

from __future__ import annotations

import importlib.util

from r2d2_agent.distributed.ray_backend.options import RayOptions

__all__ = ["RAY_INSTALL_HINT", "RayOptions", "require_ray"]

RAY_INSTALL_HINT = 'pip install "r2d2-agent[ray]"  (or: pip install "ray>=2.9")'


def require_ray() -> None:
    """Checks that Ray can be imported, without importing it.

    Raises:
        ImportError: Ray is not installed; the message says what to install.
    """
    if importlib.util.find_spec("ray") is None:
        raise ImportError(f"backend='ray' needs Ray, which is not installed: {RAY_INSTALL_HINT}")
