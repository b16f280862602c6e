"""The distributed runtime: `R2D2Manager` and the contracts its backends share.

Follow one env step from an actor to the learner's update (docs/architecture.md):

* `spec`: the frozen run spec, options, limits and start arguments that cross process
  boundaries; `process_setup`: how every child prepares itself before its role runs.
* `messages`: every message, as a dataclass, and the four channel interfaces the loops
  see of a transport.
* `actor_runner`, `learner_runner`: those loops, backend-agnostic; `wiring` builds them
  from their start arguments.
* `supervision`: the bookkeeping and run loop every backend shares; `reports`: what a run
  reports (`Progress`, `TrainResult`, `R2D2ProcessError`, where the time went).
* `mp`: the multiprocessing backend (shared-memory weights, per-actor pipes, supervisor);
  `ray_backend`: the Ray backend.
* `manager`: `R2D2Manager`, which validates once and hands a run to a backend.

Nothing here imports TensorFlow at import time.
"""

from r2d2_agent.distributed.manager import R2D2Manager
from r2d2_agent.distributed.reports import (
    Progress,
    R2D2ProcessError,
    TrainResult,
    describe_exit,
)
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
