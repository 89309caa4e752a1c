"""Spoken test audio, synthesized with the embedded Piper voice."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from voice_agent.audio import resample

SHARED_AUDIO = Path(__file__).resolve().parents[2] / "shared" / "audio"


@functools.cache
def _voice():
    from voice_agent.tts import PiperTTS

    return PiperTTS()


@functools.lru_cache(maxsize=64)
def _synthesize(text: str, rate: int) -> np.ndarray:
    voice = _voice()
    return resample(voice.synthesize_blocking(text) * 0.5, voice.sample_rate, rate)


def speech(text: str, rate: int = 16000) -> np.ndarray:
    """float32 speech of ``text`` at ``rate``, at about half full scale."""
    return _synthesize(text, rate).copy()


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)
