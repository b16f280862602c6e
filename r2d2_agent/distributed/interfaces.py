"""The narrow interfaces between the actor/learner loops and a transport backend.

An actor uses `ExperienceSender.send(items)` and `WeightsSubscriber.pull_if_newer()`; the
learner uses `ExperienceReceiver.receive(max_items, timeout)` and
`WeightsPublisher.publish(arrays)`. The loops in `actor_runner` and `learner_runner` see
nothing else, so a backend (multiprocessing in `r2d2_agent.distributed.mp`, or another
one) only provides these four, and optionally a `Liveness` for its stall watchdog.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from r2d2_agent.distributed.messages import Experience

__all__ = [
    "ExperienceReceiver",
    "ExperienceSender",
    "Liveness",
    "WeightsPublisher",
    "WeightsSubscriber",
]


class Liveness:
    """How a loop shows its supervisor's stall watchdog that it is alive.

    The loops call `beat()` once per iteration (an env step, a learner iteration, a wait
    for weights) and run operations that may legitimately take long (the first trace of
    the update graph, callback hooks such as a checkpoint writing the replay, a send held
    by back-pressure) inside `busy(what)`, during which the backend beats on the loop's
    behalf from another thread. A process frozen as a whole (SIGSTOP) stops both; a loop
    stuck outside `busy` stops beating. This base class does nothing (no watchdog).
    """

    def beat(self) -> None:
        """A sign of life of the loop."""

    @contextlib.contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """Meanwhile the loop may be silent (`what` names the operation, for logs)."""
        yield


class ExperienceSender(abc.ABC):
    """Actor side of the experience channel."""

    @abc.abstractmethod
    def send(self, items: list[Experience], timeout: float | None = None) -> bool:
        """Sends a small batch of items, blocking while the channel is full.

        Args:
            items: The items to send.
            timeout: Seconds to wait for room; None waits until the run stops.

        Returns:
            True once enqueued; False if the run is stopping (nothing is sent then).

        Raises:
            TimeoutError: Still full after `timeout` seconds.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the sender's resources."""


class ExperienceReceiver(abc.ABC):
    """Learner side of the experience channel."""

    @abc.abstractmethod
    def receive(self, max_items: int, timeout: float) -> list[Experience]:
        """Waits up to `timeout` seconds for the first item, then drains up to `max_items`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the receiver's resources."""


class WeightsPublisher(abc.ABC):
    """Learner side of the weights channel."""

    @abc.abstractmethod
    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """Makes `arrays` the current weights; returns the new version (1, 2, ...)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the publisher's resources."""


class WeightsSubscriber(abc.ABC):
    """Actor side of the weights channel."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Version of the weights last returned by `pull_if_newer` (0: none yet)."""

    @abc.abstractmethod
    def pull_if_newer(self) -> list[np.ndarray] | None:
        """Returns the latest weights if newer than `version`, else None."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the subscriber's resources."""
