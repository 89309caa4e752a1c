"""Real-time output pacing with a bounded lead.

Clients (browsers, Twilio) buffer whatever they receive. Sending a whole
answer at once would make an interruption useless: the client would keep
playing seconds of stale audio. The pacer models the client's playback buffer
and only lets a frame go once the buffer holds less than ``lead_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class PlaybackClock:
    """A model of the client's playback buffer, driven by the frames we send."""

    def __init__(self, lead_s: float, clock: Callable[[], float] = time.monotonic):
        self.lead_s = lead_s
        self._clock = clock
        self._drains_at = 0.0  # when the client's buffer runs dry
        self._sent_s = 0.0

    def delay(self) -> float:
        """Seconds to wait before the next frame may be sent."""
        return max(0.0, self._drains_at - self._clock() - self.lead_s)

    def sent(self, duration_s: float) -> None:
        now = self._clock()
        self._drains_at = max(self._drains_at, now) + duration_s
        self._sent_s += duration_s

    def buffered_s(self) -> float:
        """Audio sent but, by this model, not yet played."""
        return max(0.0, self._drains_at - self._clock())

    def played_s(self) -> float:
        """Audio played so far, by this model, since the last :meth:`reset`."""
        return self._sent_s - self.buffered_s()

    def reset(self) -> None:
        """The client dropped its buffer (``clear``)."""
        self._drains_at = 0.0
        self._sent_s = 0.0
