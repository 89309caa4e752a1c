"""Spoken test audio from the embedded Piper voice: the one place that tests, turn generators and evals synthesize speech."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..audio import resample
from ..replay.measure import speech_bounds

if TYPE_CHECKING:
    from ..engines.tts import PiperTTS

LEVEL = 0.5  # about half full scale: loud enough for the VAD, with headroom for mixing
JOIN_MARGIN_S = 0.02  # of the voice's own fade kept at each join of a composed turn


@functools.cache
def _voice() -> PiperTTS:
    from ..engines.tts import PiperTTS  # loads the voice model: only when speech is asked for

    return PiperTTS()


@functools.lru_cache(maxsize=64)
def _synthesize(text: str, rate: int) -> np.ndarray:
    return rendition(text, rate)


def rendition(text: str, rate: int = 16000) -> np.ndarray:
    """A new rendition of ``text`` at every call (Piper samples its prosody noise); :func:`speech` keeps one."""
    voice = _voice()
    return resample(voice.synthesize_blocking(text) * LEVEL, voice.sample_rate, rate)


def speech(text: str, rate: int = 16000) -> np.ndarray:
    """float32 speech of ``text`` at ``rate``, at about half full scale."""
    return _synthesize(text, rate).copy()


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def turn(parts: Sequence[str | float], rate: int = 16000, *, trim_joins: bool = False) -> np.ndarray:
    """One user turn: each string spoken, each number that many seconds of silence, in order.

    Piper pads every sentence with silence of its own; with ``trim_joins`` that
    padding is cut at the joins (keeping JOIN_MARGIN_S of fade), so that a pause
    inside the turn is as long as written. The turn's own start and end keep theirs.
    """
    pieces = []
    margin = int(JOIN_MARGIN_S * rate)
    for index, part in enumerate(parts):
        if isinstance(part, str):
            audio = speech(part, rate)
            bounds = speech_bounds(audio, rate) if trim_joins else None
            if bounds is not None:
                start = bounds.start - margin if index > 0 else 0
                end = bounds.end + margin if index < len(parts) - 1 else len(audio)
                audio = audio[max(0, start) : end]
            pieces.append(audio)
        else:
            pieces.append(silence(part, rate))
    return np.concatenate(pieces)
