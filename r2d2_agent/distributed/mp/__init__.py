"""The multiprocessing backend of `R2D2Manager` (one machine, `spawn` processes).

* `shared_weights`: a seqlocked shared-memory segment, one writer and many readers.
* `weights_channel`, `pipes`: the transport interfaces on that segment and on per-actor
  pipes; `shared_state`: the lock-free stop flag and counters.
* `bootstrap` (child side), `children` (parent side), `entrypoints` (the child mains) and
  `supervisor` (one `train` call).
"""
