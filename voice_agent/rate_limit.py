"""A token bucket, for the per-client limits and for the log's own throttling."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]


class RateLimit:
    """A token bucket: ``rate`` units per second, at most ``burst`` saved up. A rate of 0 or less is no limit."""

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self, amount: float) -> bool:
        """Spend ``amount`` if the bucket holds it; otherwise spend nothing and refuse."""
        if self.rate <= 0:
            return True
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if amount > self._tokens:
            return False
        self._tokens -= amount
        return True
