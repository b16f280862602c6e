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
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from r2d2_agent.distributed.messages import Experience

__all__ = [
    "ExperienceReceiver",
    "ExperienceSender",
    "KeepAliveLiveness",
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


class KeepAliveLiveness(Liveness):
    """A `Liveness` whose `busy` sections (nested freely) are covered by a daemon
    keep-alive thread that calls `keep_alive()` every `interval` seconds; a process frozen
    as a whole (SIGSTOP) stops that thread too. A backend implements `beat` and
    `keep_alive` (by default the same), and may follow `set_busy`.

    Args:
        interval: Seconds between the keep-alive thread's calls.
    """

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._depth = 0
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_depth": 0, "_thread": None}  # the thread stays here

    def keep_alive(self) -> None:
        """A sign of life given by the keep-alive thread during a busy section."""
        self.beat()

    def set_busy(self, busy: bool) -> None:
        """Called when the outermost busy section begins (True) and ends (False)."""

    @contextlib.contextmanager
    def busy(self, what: str) -> Iterator[None]:
        self._depth += 1
        if self._depth == 1:
            self.set_busy(True)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._keep_alive_loop, name="r2d2-keep-alive", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.set_busy(False)
            self.beat()

    def _keep_alive_loop(self) -> None:
        while True:
            time.sleep(self._interval)
            if self._depth > 0:
                self.keep_alive()


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
