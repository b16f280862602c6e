"""Checkpoints that resume a run: one HDF5 file per checkpoint, written atomically.

Modules, bottom up (each imports only those above it in this list):

* `errors`: the errors reading or resuming a checkpoint raises, each naming the file.
* `h5format`: the file's format marks, checksums and the reading of its replay group
  (h5py), shared by writing and reading.
* `state`: what a checkpoint holds (`TrainingState`, `TrainingCounters`,
  `ReplaySnapshot`).
* `h5file`: writing (temporary file, fsync, rename; keeping the last K) and reading
  (checksums, clear errors naming the file) with h5py.
* `compatibility`: whether a checkpoint fits a configuration (the fields that shape the
  network, and those that shape the replay when it holds one), checked before any
  process starts.

Nothing here imports TensorFlow, so the manager's parent process can check a checkpoint
before it starts any child. The file format is described in `h5file`.
"""

from r2d2_agent.checkpoints.compatibility import (
    NETWORK_FIELDS,
    REPLAY_FIELDS,
    changed_fields,
    check_compatible,
    check_replay_compatible,
    config_as_data,
)
from r2d2_agent.checkpoints.errors import (
    CheckpointError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    MissingCheckpointError,
    WeightsFileError,
)
from r2d2_agent.checkpoints.h5file import (
    CHECKPOINT_PATTERN,
    FORMAT_NAME,
    FORMAT_VERSION,
    checkpoint_files,
    checkpoint_name,
    is_checkpoint_file,
    latest_checkpoint,
    prune_checkpoints,
    read_checkpoint,
    read_replay,
    resolve_checkpoint,
    write_checkpoint,
)
from r2d2_agent.checkpoints.state import (
    ReplaySnapshot,
    TrainingCounters,
    TrainingState,
    spread_counts,
)

__all__ = [
    "CHECKPOINT_PATTERN",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "NETWORK_FIELDS",
    "REPLAY_FIELDS",
    "CheckpointError",
    "CorruptCheckpointError",
    "IncompatibleCheckpointError",
    "MissingCheckpointError",
    "ReplaySnapshot",
    "TrainingCounters",
    "TrainingState",
    "WeightsFileError",
    "changed_fields",
    "check_compatible",
    "check_replay_compatible",
    "checkpoint_files",
    "checkpoint_name",
    "config_as_data",
    "is_checkpoint_file",
    "latest_checkpoint",
    "prune_checkpoints",
    "read_checkpoint",
    "read_replay",
    "resolve_checkpoint",
    "spread_counts",
    "write_checkpoint",
]
