"""The distributed runtime: `R2D2Manager` and the contracts its backends share.

* `spec`: the frozen run spec, options, limits and start arguments that cross process
  boundaries; `messages`: every message, as a dataclass.
* `interfaces`: what the actor and learner loops see of a transport.
* `actor_runner`, `learner_runner`: those loops, backend-agnostic.
* `mp`: the multiprocessing backend (shared-memory weights, per-actor pipes, supervisor).
* `manager`: `R2D2Manager`, which validates once and hands a run to a backend.

Nothing here imports TensorFlow at import time.
"""

from r2d2_agent.distributed.errors import R2D2ProcessError, describe_exit
from r2d2_agent.distributed.manager import R2D2Manager
from r2d2_agent.distributed.reports import Progress, TrainResult
from r2d2_agent.distributed.spec import RunOptions, RunSpec, TrainLimits

__all__ = [
    "Progress",
    "R2D2Manager",
    "R2D2ProcessError",
    "RunOptions",
    "RunSpec",
    "TrainLimits",
    "TrainResult",
    "describe_exit",
]
