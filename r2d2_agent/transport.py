"""Narrow, backend-agnostic interfaces between the actor/learner loops and the transport.

Actors use ``ExperienceSender.send(items)`` and ``WeightsSubscriber.pull_if_newer()``;
the learner uses ``ExperienceReceiver.receive(max_items, timeout)`` and
``WeightsPublisher.publish(arrays)``, so another backend (e.g. Ray) only has to provide
other implementations. `R2D2Manager`'s experience pipes and the publisher its learner
attaches to the manager's segment are in `r2d2_agent.channels`.

The weights channel below goes through a ``SharedWeights`` segment: the
``SharedWeightsPublisher`` owns it, and an actor builds its ``SharedWeightsSubscriber``
from a picklable handle (``handle.make_subscriber()``); ``SharedWeightsSubscriberHandle``
is plain data (``pickle.dumps`` works).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from r2d2_agent.weights import SharedWeights, SharedWeightsHandle, WeightsSpec


class ExperienceSender(abc.ABC):
    """Actor side of the experience channel."""

    @abc.abstractmethod
    def send(self, items: list, timeout: float | None = None) -> bool:
        """Sends a small batch of items, blocking while the channel is full.

        Returns:
            True once enqueued; False if the stop event is set (nothing is sent then).

        Raises:
            TimeoutError: Still full after ``timeout`` seconds (None: wait until stop).
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the sender's resources."""


class ExperienceReceiver(abc.ABC):
    """Learner side of the experience channel."""

    @abc.abstractmethod
    def receive(self, max_items: int, timeout: float) -> list:
        """Waits up to ``timeout`` s for the first item, then drains up to ``max_items``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the receiver's resources."""


class WeightsPublisher(abc.ABC):
    """Learner side of the weights channel."""

    @abc.abstractmethod
    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """Makes ``arrays`` the current weights; returns the new version (1, 2, ...)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the publisher's resources."""


class WeightsSubscriber(abc.ABC):
    """Actor side of the weights channel."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Version of the weights last returned by ``pull_if_newer`` (0: none yet)."""

    @abc.abstractmethod
    def pull_if_newer(self) -> list[np.ndarray] | None:
        """Returns the latest weights if newer than ``version``, else None."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the subscriber's resources."""


# ------------------------------------------------------ shared-memory weights -------
class SharedWeightsPublisher(WeightsPublisher):
    """Owns a ``SharedWeights`` segment (made from ``spec``, named by ``name_prefix``)."""

    def __init__(self, spec: WeightsSpec, name_prefix: str = "r2d2") -> None:
        self._weights = SharedWeights.create(spec, name_prefix=name_prefix)

    @property
    def subscriber_handle(self) -> SharedWeightsSubscriberHandle:
        """Picklable handle from which an actor builds its subscriber."""
        return SharedWeightsSubscriberHandle(self._weights.handle)

    @property
    def version(self) -> int:
        """Latest published version."""
        return self._weights.version()

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See ``WeightsPublisher.publish``."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches and unlinks the segment (idempotent)."""
        self._weights.close()
        self._weights.unlink()


class SharedWeightsSubscriber(WeightsSubscriber):
    """Reads new weights from a ``SharedWeights`` segment.

    Args:
        handle: From ``SharedWeightsPublisher.subscriber_handle``.
        reuse_buffers: Return the same preallocated arrays on every pull (no allocation,
            but the previous result is overwritten); else fresh arrays each time.
    """

    def __init__(self, handle: SharedWeightsHandle, reuse_buffers: bool = False) -> None:
        self._weights = SharedWeights.attach(handle)
        self._out = handle.spec.allocate() if reuse_buffers else None
        self._version = 0

    @property
    def version(self) -> int:
        """See ``WeightsSubscriber.version``."""
        return self._version

    def pull_if_newer(self) -> list[np.ndarray] | None:
        """See ``WeightsSubscriber.pull_if_newer``."""
        got = self._weights.read_if_newer(self._version, out=self._out)
        if got is None:
            return None
        self._version, arrays = got
        return arrays

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()


@dataclass(frozen=True)
class SharedWeightsSubscriberHandle:
    """Picklable: an actor calls ``make_subscriber()`` in its own process."""

    weights: SharedWeightsHandle
    reuse_buffers: bool = False

    def make_subscriber(self) -> SharedWeightsSubscriber:
        """Attaches to the segment in the current process."""
        return SharedWeightsSubscriber(self.weights, self.reuse_buffers)
