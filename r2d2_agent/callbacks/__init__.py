"""Callbacks: `R2D2Callback` hooks plus ready-made save/load and logging callbacks.

* `R2D2Callback`: keras-rl's callback hooks plus the manager, learner and actor hooks,
  and `request_stop` to end a run from any process.
* `CheckpointCallback`: periodic atomic checkpoints that resume a run, keeping the last K.
* `RunLogCallback`: a run directory of JSON lines from every process, TensorBoard
  summaries and, optionally, the learning-curve picture.
* `TensorBoardCallback`: namespaced TensorBoard scalars alone.
* `EvaluationCallback`: greedy evaluations every interval on an env of its own, keeping
  (and optionally restoring) the best weights, or ending the run at a mean return.
* `StateDiscrepancyCallback`: the recurrent-state diagnostic (is burn-in long enough?)
  of a manager run: episodes recorded in the actors, measured in the learner.

None of them imports TensorFlow, so they keep the manager's parent and numpy actors free
of it.
"""

from r2d2_agent.callbacks.base import R2D2Callback
from r2d2_agent.callbacks.checkpoint import CheckpointCallback
from r2d2_agent.callbacks.evaluation import Evaluation, EvaluationCallback
from r2d2_agent.callbacks.run_log import RunLogCallback
from r2d2_agent.callbacks.state_discrepancy import StateDiscrepancyCallback
from r2d2_agent.callbacks.tensorboard import TensorBoardCallback

__all__ = [
    "CheckpointCallback",
    "Evaluation",
    "EvaluationCallback",
    "R2D2Callback",
    "RunLogCallback",
    "StateDiscrepancyCallback",
    "TensorBoardCallback",
]
