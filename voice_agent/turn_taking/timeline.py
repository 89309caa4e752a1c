"""The audio a session has received, addressed by sample index, with when it arrived.

Every 16 kHz sample that reaches the VAD has an index, counted from the start
of the stream. The timeline keeps the recent samples (the caller decides how
far back, with :meth:`AudioTimeline.trim`) and the arrival time of each frame,
so that a sample index found by the VAD maps back to the wall-clock instant
that audio arrived.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np

from ..audio import PIPELINE_RATE
from ..engines.vad import WINDOW

ARRIVAL_LOOKBACK_SAMPLES = 2 * PIPELINE_RATE  # frames that vouch for when audio arrived


class AudioTimeline:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._audio = np.zeros(0, dtype=np.float32)
        self._start = 0  # sample index of self._audio[0]
        self._received = 0
        self._arrivals: deque[tuple[int, float]] = deque()  # (index just past a frame, when it arrived)

    @property
    def received(self) -> int:
        """Samples received so far: the index of the next sample."""
        return self._received

    @property
    def start(self) -> int:
        """Index of the oldest sample still kept."""
        return self._start

    def append(self, samples: np.ndarray) -> None:
        """Add a frame of 16 kHz samples that arrived now."""
        self._audio = np.concatenate([self._audio, samples])
        self._received += len(samples)
        self._arrivals.append((self._received, self._clock()))

    def slice(self, start: int, end: int) -> np.ndarray:
        """A copy of samples ``start`` to ``end``; the part already trimmed away is missing."""
        return self._audio[max(0, start - self._start) : max(0, end - self._start)].copy()

    def trim(self, keep_from: int) -> None:
        """Forget the samples before index ``keep_from``, and the arrival times only they needed."""
        if keep_from > self._start:
            self._audio = self._audio[keep_from - self._start :]
            self._start = keep_from
        while len(self._arrivals) > 1 and self._arrivals[0][0] < self._start:
            self._arrivals.popleft()

    def refine_end(self, window_end: int) -> int:
        """Where speech really ends inside the last speech window.

        Silero marks whole 32 ms windows, and its state decays for a window or
        so after speech stops, so the window's end is late by 4-48 ms. The end
        of the last 8 ms block within 20 dB of the loudest block in the last two
        windows is closer to what a listener (or the replay client) would say.
        """
        block = WINDOW // 4
        audio = self.slice(window_end - 2 * WINDOW, window_end)
        blocks = len(audio) // block
        if blocks == 0:
            return window_end
        rms = np.sqrt(np.mean(audio[len(audio) - blocks * block :].reshape(blocks, block) ** 2, axis=1))
        loud = np.flatnonzero(rms >= 0.1 * rms.max())
        return window_end - (blocks - 1 - int(loud[-1])) * block if len(loud) else window_end

    def arrival_time(self, sample: int) -> float:
        """When ``sample`` arrived, on the audio's own clock.

        A frame's processing time is late by however long the event loop was
        busy, so each frame gives an upper bound on when the stream's time zero
        arrived; the smallest over the last seconds is the least delayed. For a
        client that sends at real time this removes our own stalls from the
        result; for one that sends faster it changes nothing.
        """
        frame_end, processed = next(
            ((end, arrived) for end, arrived in self._arrivals if end >= sample), (sample, self._clock())
        )
        # Only frames up to the one holding the sample: later ones from a fast client would vouch too early.
        recent = [
            arrived - end / PIPELINE_RATE
            for end, arrived in self._arrivals
            if sample - ARRIVAL_LOOKBACK_SAMPLES <= end <= frame_end
        ]
        return min([processed] + [offset + frame_end / PIPELINE_RATE for offset in recent])
