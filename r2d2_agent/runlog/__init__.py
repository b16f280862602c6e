"""The run directory: one JSON-lines file per process, and reading them back.

* `files`: the file names of a run directory and `JsonLinesWriter`, which appends one
  record per line with a single `write` call.
* `reader`: `read_run`, which loads a run directory into a `RunLog` (a line torn by a
  crash is skipped, not fatal).
* `tensorboard`: `ScalarEventWriter`, TensorBoard scalars without TensorFlow.

Layout of a run directory (written by `r2d2_agent.callbacks.RunLogCallback`)::

    run.json            the config, library version and start time (the learner writes it)
    actor-<i>.jsonl     one line per finished episode of actor i
    learner.jsonl       one line every `interval` learner updates
    eval.jsonl          one line per evaluation (when there are evaluations)
    metrics-<process>.jsonl  one line per custom metric value (`log_metric`) of a process
    tensorboard/        TensorBoard event files, one subfolder per process
    learning_curve.png  `python -m r2d2_agent.plot RUN_DIR`
    state_discrepancy.json, .png, state_discrepancy_episodes/
                        `StateDiscrepancyCallback(RUN_DIR)`: the burn-in diagnostic

Nothing here imports TensorFlow or matplotlib.
"""

from r2d2_agent.runlog.files import (
    ACTOR_FILE,
    EVAL_FILE,
    INFO_FILE,
    LEARNER_FILE,
    METRICS_FILE,
    JsonLinesWriter,
    actor_file,
    metrics_file,
    write_json_atomic,
)
from r2d2_agent.runlog.reader import RunLog, read_jsonl, read_run
from r2d2_agent.runlog.tensorboard import ScalarEventWriter

__all__ = [
    "ACTOR_FILE",
    "EVAL_FILE",
    "INFO_FILE",
    "LEARNER_FILE",
    "METRICS_FILE",
    "JsonLinesWriter",
    "RunLog",
    "ScalarEventWriter",
    "actor_file",
    "metrics_file",
    "read_jsonl",
    "read_run",
    "write_json_atomic",
]
