"""Every message that crosses a process boundary in a distributed run, as a dataclass.

Data plane (actor -> learner): `Experience` items, in small batches.
Events (child -> parent): `WeightsLayout`, `EpisodeFinished`, `ChildFailed`,
`ActorSummary`, `LearnerSummary`, `StopRequested`.
Control (parent -> learner): `WeightsSegment`, `ConnectActor`.

A backend dispatches on the message's type, never on a string tag.

Channels: the actor and learner loops (`actor_runner`, `learner_runner`) see a transport
through four narrow interfaces only. An actor uses `ExperienceSender.send(items)` and
`WeightsSubscriber.pull_if_newer()`; the learner uses
`ExperienceReceiver.receive(max_items, timeout)` and `WeightsPublisher.publish(arrays)`.
A backend (multiprocessing in `r2d2_agent.distributed.mp`, Ray in
`r2d2_agent.distributed.ray_backend`, or another one) provides these four, and a
`Liveness` for its stall watchdog (a beat per loop iteration; long operations as busy).
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2_agent.replay.adder import SequenceRecord

if TYPE_CHECKING:
    from r2d2_agent.distributed.mp.shared_weights import SharedWeightsHandle, WeightsSpec

__all__ = [
    "KeepAliveLiveness",
    "Liveness",
    "ActorSummary",
    "ChildEvent",
    "ChildFailed",
    "ConnectActor",
    "EpisodeFinished",
    "Experience",
    "ExperienceReceiver",
    "ExperienceSender",
    "LearnerSummary",
    "StopRequested",
    "WeightsLayout",
    "WeightsPublisher",
    "WeightsSegment",
    "WeightsSubscriber",
]


@dataclass(frozen=True)
class Experience:
    """One finished sequence on its way from an actor to the learner's replay.

    Attributes:
        record: The sequence, its initial priority and the frames it brings (each frame
            crosses the boundary once; see `SequenceRecord`).
        env_steps: Env steps the actor took since its previous item (the learner's rate
            limiter counts env steps with them).
        stream: Which env of which actor incarnation sent it (frame ids are per stream).
    """

    record: SequenceRecord
    env_steps: int
    stream: int = 0


@dataclass(frozen=True)
class WeightsLayout:
    """Learner -> parent, once built: the layout of its weights (to size shared memory)."""

    spec: WeightsSpec


@dataclass(frozen=True)
class EpisodeFinished:
    """Actor -> parent: an episode ended."""

    episode_return: float
    episode_steps: int


@dataclass(frozen=True)
class ChildFailed:
    """Child -> parent, just before the child exits with an error."""

    traceback: str


@dataclass(frozen=True)
class ActorSummary:
    """Actor -> parent when it stops normally.

    Attributes:
        pid: The actor's process id.
        policy: Class name of its acting network (`NumpyNetwork` or `KerasPolicy`).
        tensorflow_loaded: Whether TensorFlow was imported in the process.
        steps: Env steps it took.
        weight_pulls: Weight sets it took from the learner.
        items_sent: Sequences it sent.
        seconds: Where its loop's wall time went (`ActorRunner.time`): "acting",
            "sending", "weights", "waiting_for_weights", "total".
    """

    pid: int
    policy: str
    tensorflow_loaded: bool
    steps: int
    weight_pulls: int
    items_sent: int
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LearnerSummary:
    """Learner -> parent when it stops normally.

    Attributes:
        pid: The learner's process id.
        updates: Learner updates (a resumed learner's count goes on).
        sequences: Sequences received.
        seconds: Where its loop's wall time went (`LearnerRunner.time`): "learning",
            "replay_add", "receiving", "waiting", "publishing", "tracing", "other", "total".
    """

    pid: int
    updates: int
    sequences: int
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StopRequested:
    """Child -> parent: a callback asked to end the run (`R2D2Callback.request_stop`).

    The parent stops every process as at a limit; `train` returns with stop_reason
    "callback" and `stop_detail` naming the process and the reason.

    Attributes:
        reason: The callback's reason.
    """

    reason: str


ChildEvent = (
    WeightsLayout | EpisodeFinished | ChildFailed | ActorSummary | LearnerSummary | StopRequested
)
"""Anything a child sends its parent."""


@dataclass(frozen=True)
class WeightsSegment:
    """Parent -> learner: the shared-memory segment to publish weights into."""

    handle: SharedWeightsHandle


@dataclass(frozen=True)
class ConnectActor:
    """Parent -> learner: read this (new or restarted) actor's experience from `connection`.

    Attributes:
        index: The actor's index.
        connection: The read end of the actor's pipe (a `multiprocessing` connection,
            which multiprocessing can hand to another process).
    """

    index: int
    connection: Any


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

    min_interval: float = 0.0
    """Seconds below which a second publish would go unread (actors of a transport that
    learns of new weights only every so often): the learner's loop then leaves a due
    publish for its first iteration that many seconds after the previous one, and
    publishes the last weights when it ends. 0: every due publish at once."""

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
        """Returns the latest weights if newer than `version`, else None (also while a
        newer version is still being fetched, for a subscriber that fetches in the
        background)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the subscriber's resources."""


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
