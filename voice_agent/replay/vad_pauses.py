"""Pauses inside a recording's speech, as the pipeline's own Silero VAD hears them.

The session counts silence from the last 32 ms window whose speech
probability reached ``--vad-threshold``; a pause here is the same thing: a run
of windows below the threshold between two windows at or above it. On real
recordings (breaths, room noise, crosstalk) this differs from the replay's
energy pass (``measure.speech_bursts``), and it is what the agent can cut
into, so the endpointing eval and the real-turn cutter both use it.
"""

from __future__ import annotations

import numpy as np

from ..audio import resample
from ..engines.vad import SAMPLE_RATE, WINDOW, WINDOW_MS, SileroVAD

# The endpointing eval's mid-turn pauses are 300 to 1500 ms; shorter gaps are the
# breaks between words or at a comma that any speaker leaves.
MIN_PAUSE_MS = 300

_model: SileroVAD | None = None


def probabilities(samples: np.ndarray, rate: int) -> np.ndarray:
    """Silero's speech probability for each 512-sample window of the audio at 16 kHz."""
    global _model
    if _model is None:
        _model = SileroVAD()  # one per process, as in the server
    audio = resample(samples.astype(np.float32, copy=False), rate, SAMPLE_RATE)
    return np.array(_model.stream().process(audio), dtype=np.float64)


def speech_windows(probs: np.ndarray, threshold: float) -> np.ndarray:
    return probs >= threshold


def pauses_in(speech: np.ndarray, min_ms: int = MIN_PAUSE_MS) -> list[tuple[int, int]]:
    """[first, end) window ranges of the gaps of at least ``min_ms`` between speech windows."""
    windows = np.flatnonzero(speech)
    least = max(1, round(min_ms / WINDOW_MS))  # 300 ms: 9 windows (288 ms)
    return [(int(a) + 1, int(b)) for a, b in zip(windows, windows[1:]) if b - a - 1 >= least]


def pauses(samples: np.ndarray, rate: int, threshold: float, min_ms: int = MIN_PAUSE_MS) -> list[tuple[int, int]]:
    """[start, end) sample ranges (at ``rate``) of the mid-speech pauses Silero hears."""
    probs = probabilities(samples, rate)
    scale = WINDOW * rate / SAMPLE_RATE
    return [(int(a * scale), int(b * scale)) for a, b in pauses_in(speech_windows(probs, threshold), min_ms)]
