"""`TimeSplit`: where a loop's wall time goes, by activity.

The actor and learner runners time the few places where they wait or hand work to another
process (sending, receiving, pulling and publishing weights) and their main work
(learning); `shares()` puts the rest under the loop's remaining activity (acting, for an
actor). Each measure is two `time.perf_counter` calls, so the cost stays far below a
learner update, and an actor measures only per send and per weights pull, never per step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["TimeSplit"]


class TimeSplit:
    """Accumulates wall seconds per activity between `start` and `stop`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        """Seconds measured per activity."""
        self._started: float | None = None
        self._elapsed = 0.0

    def start(self) -> None:
        """Starts the clock of the whole loop."""
        self._started = time.perf_counter()

    def stop(self) -> None:
        """Stops it (`elapsed` then stays fixed)."""
        if self._started is not None:
            self._elapsed = time.perf_counter() - self._started
            self._started = None

    @property
    def elapsed(self) -> float:
        """Seconds between `start` and `stop` (or now, while running)."""
        if self._started is not None:
            return time.perf_counter() - self._started
        return self._elapsed

    @contextlib.contextmanager
    def measure(self, activity: str) -> Iterator[None]:
        """Adds the wall time of the `with` block to `activity`."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.add(activity, time.perf_counter() - begin)

    def add(self, activity: str, seconds: float) -> None:
        """Adds `seconds` to `activity`."""
        self.seconds[activity] = self.seconds.get(activity, 0.0) + seconds

    def shares(self, rest: str) -> dict[str, float]:
        """Seconds per activity, the unmeasured remainder under `rest`, and `total`.

        Args:
            rest: The name of the remainder (e.g. "acting").

        Returns:
            Rounded seconds (ms precision) per activity, `rest` and `total`.
        """
        total = self.elapsed
        out = {name: round(value, 3) for name, value in sorted(self.seconds.items())}
        out[rest] = round(max(total - sum(self.seconds.values()), 0.0), 3)
        out["total"] = round(total, 3)
        return out
