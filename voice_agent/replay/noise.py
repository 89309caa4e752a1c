"""A steady noise floor for the replay client: a room's hum, a line's hiss.

A recording made in a studio holds digital silence between words; a caller's
microphone never does. Some of the agent's judgements look at the input around
speech (is it near silence while the agent talks? does its own voice come
back?), so a replay can add :class:`NoiseFloor` under everything it sends:
pink noise (equal energy per octave, as room noise and fans roughly are) at a
set RMS level, the same for every run with the same seed.
"""

from __future__ import annotations

import numpy as np

LOOP_S = 10.0  # the noise repeats after this long: too long to hear as a pattern, or for the VAD to learn


class NoiseFloor:
    def __init__(self, rate: int, dbfs: float, seed: int = 0):
        self._loop = pink_noise(int(LOOP_S * rate), dbfs, seed)
        self._position = 0

    def next(self, samples: int) -> np.ndarray:
        """The next ``samples`` of the noise."""
        indices = (self._position + np.arange(samples)) % len(self._loop)
        self._position = (self._position + samples) % len(self._loop)
        return self._loop[indices]


def pink_noise(samples: int, dbfs: float, seed: int = 0) -> np.ndarray:
    """``samples`` of pink noise whose RMS is ``dbfs`` (full scale 1.0); it loops without a click."""
    rng = np.random.default_rng(seed)
    spectrum = rng.standard_normal(samples // 2 + 1) + 1j * rng.standard_normal(samples // 2 + 1)
    frequencies = np.arange(len(spectrum), dtype=np.float64)
    frequencies[0] = 1.0
    spectrum /= np.sqrt(frequencies)  # power falls as 1/f
    spectrum[0] = 0.0  # no DC
    noise = np.fft.irfft(spectrum, samples)
    noise *= 10 ** (dbfs / 20) / np.sqrt(np.mean(noise**2))
    return noise.astype(np.float32)
