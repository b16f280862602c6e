"""`RateMeter`: a count per second between two readings (updates/s, env steps/s)."""

from __future__ import annotations

import time

__all__ = ["RateMeter"]


class RateMeter:
    """Rate of a growing count between consecutive `rate` calls.

    The first call only starts the clock (it returns None), so a rate never includes the
    time before the meter saw the count for the first time (start-up, a resumed run's
    earlier count).
    """

    def __init__(self) -> None:
        self._time: float | None = None
        self._count = 0

    def rate(self, count: int) -> float | None:
        """Per-second growth of `count` since the previous call (None on the first)."""
        now = time.monotonic()
        previous_time, previous_count = self._time, self._count
        self._time, self._count = now, int(count)
        if previous_time is None or now <= previous_time:
            return None
        return (int(count) - previous_count) / (now - previous_time)
