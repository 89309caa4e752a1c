"""How the voice ends: pitch and loudness of the last words against the speaker's own.

A finished statement usually ends with a falling, quieter voice; a speaker who
pauses to think often holds the pitch level. Plain autocorrelation pitch on
40 ms frames is enough to tell a fall from a level voice; it is a feature of
the end-of-turn model (``turn_model.py``), computed from the turn's audio
before the pause.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATE = 16000
FRAME = 640  # 40 ms
END_S = 0.3  # the end of the words: their last 300 ms
HISTORY_S = 10.0  # the speaker's own level: the turn's last ten seconds
LOW_HZ, HIGH_HZ = 70.0, 400.0
VOICED_CORRELATION = 0.5  # a frame whose best lag correlates this well is voiced


@dataclass(frozen=True)
class Prosody:
    pitch_st: float  # semitones of the end's median pitch over the speaker's; 0: not voiced at the end
    energy_db: float  # dB of the end's loudness over the speaker's speech


def _frames(audio: np.ndarray) -> np.ndarray:
    count = len(audio) // FRAME
    return audio[: count * FRAME].reshape(count, FRAME).astype(np.float64)


def _pitch(frames: np.ndarray) -> np.ndarray:
    """Hz per frame, NaN where unvoiced: the lag of the highest normalised autocorrelation."""
    centred = frames - frames.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(centred, 2 * FRAME, axis=1)
    correlation = np.fft.irfft(np.abs(spectrum) ** 2, axis=1)[:, :FRAME]
    low, high = int(RATE / HIGH_HZ), int(RATE / LOW_HZ)
    energy = correlation[:, :1]
    normalised = correlation[:, low:high] / np.maximum(energy, 1e-12)
    best = normalised.argmax(axis=1)
    hz = RATE / (best + low)
    return np.where(normalised.max(axis=1) >= VOICED_CORRELATION, hz, np.nan)


def prosody(audio: np.ndarray) -> Prosody:
    """The end of 16 kHz ``audio`` (speech up to a pause) against what comes before it."""
    frames = _frames(audio[-int(HISTORY_S * RATE) :])
    if len(frames) < 2 * END_S * RATE / FRAME:
        return Prosody(0.0, 0.0)
    power = (frames**2).mean(axis=1) + 1e-10
    speech = power >= np.percentile(power, 30)  # leave out the silences between words
    pitch = _pitch(frames)
    end = int(END_S * RATE / FRAME)
    end_pitch, all_pitch = pitch[-end:][speech[-end:]], pitch[speech]
    end_pitch, all_pitch = end_pitch[~np.isnan(end_pitch)], all_pitch[~np.isnan(all_pitch)]
    pitch_st = 0.0
    if len(end_pitch) and len(all_pitch):
        pitch_st = float(12 * np.log2(np.median(end_pitch) / np.median(all_pitch)))
    energy_db = float(10 * np.log10(power[-end:].mean() / power[speech].mean()))
    return Prosody(pitch_st, energy_db)
