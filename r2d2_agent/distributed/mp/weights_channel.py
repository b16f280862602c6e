"""Weights through a shared-memory segment: the multiprocessing `WeightsPublisher` and
`WeightsSubscriber`.

The manager creates the segment (so it can always unlink it) and the learner publishes
into it through an `AttachedWeightsPublisher`; `SharedWeightsPublisher` creates and owns a
segment itself (single-process use, benchmarks). An actor builds its
`SharedWeightsSubscriber` from the picklable `SharedWeightsHandle` in its own process and
reads new weights without pickling or a round trip.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from r2d2_agent.distributed.messages import WeightsPublisher, WeightsSubscriber
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, SharedWeightsHandle, WeightsSpec

__all__ = ["AttachedWeightsPublisher", "SharedWeightsPublisher", "SharedWeightsSubscriber"]


class SharedWeightsPublisher(WeightsPublisher):
    """Creates and owns a `SharedWeights` segment and publishes into it.

    Args:
        spec: Layout of the weights.
        name_prefix: Prefix of the segment's name.
    """

    def __init__(self, spec: WeightsSpec, name_prefix: str = "r2d2") -> None:
        self._weights = SharedWeights.create(spec, name_prefix=name_prefix)

    @property
    def handle(self) -> SharedWeightsHandle:
        """Picklable handle from which another process attaches a subscriber."""
        return self._weights.handle

    @property
    def version(self) -> int:
        """Latest published version."""
        return self._weights.version()

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See `WeightsPublisher.publish`."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches and unlinks the segment (idempotent)."""
        self._weights.close()
        self._weights.unlink()


class AttachedWeightsPublisher(WeightsPublisher):
    """Publishes into a segment someone else created (the manager owns and unlinks it).

    Args:
        handle: The segment's handle.
    """

    def __init__(self, handle: SharedWeightsHandle) -> None:
        self._weights = SharedWeights.attach(handle, writer=True)

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See `WeightsPublisher.publish`."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()


class SharedWeightsSubscriber(WeightsSubscriber):
    """Reads new weights from a `SharedWeights` segment.

    Args:
        handle: The segment's handle.
        reuse_buffers: Return the same preallocated arrays on every pull (no allocation,
            but the previous result is overwritten); else fresh arrays each time.
    """

    def __init__(self, handle: SharedWeightsHandle, reuse_buffers: bool = False) -> None:
        self._weights = SharedWeights.attach(handle)
        self._out = handle.spec.allocate() if reuse_buffers else None
        self._version = 0

    @property
    def version(self) -> int:
        """See `WeightsSubscriber.version`."""
        return self._version

    def pull_if_newer(self) -> list[np.ndarray] | None:
        """See `WeightsSubscriber.pull_if_newer`."""
        got = self._weights.read_if_newer(self._version, out=self._out)
        if got is None:
            return None
        self._version, arrays = got
        return arrays

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()
