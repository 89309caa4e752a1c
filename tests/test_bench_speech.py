"""voice_agent.bench.speech: composing a turn from spoken parts and pauses (a fake voice; the real one is e2e)."""

from __future__ import annotations

import numpy as np
import pytest

from voice_agent.bench import speech
from voice_agent.replay.measure import speech_bounds

RATE = 16000


@pytest.fixture
def fake_voice(monkeypatch):
    """Each text: 0.3 s of padding, 0.5 s of tone, 0.3 s of padding, like Piper's sentences."""

    def synthesize(text: str, rate: int) -> np.ndarray:
        t = np.arange(int(0.5 * rate)) / rate
        tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
        pad = np.zeros(int(0.3 * rate), np.float32)
        return np.concatenate([pad, tone, pad])

    monkeypatch.setattr(speech, "_synthesize", synthesize)


def test_a_turn_is_its_parts_in_order(fake_voice):
    audio = speech.turn(["one", 0.8, "two"], RATE)
    assert audio.dtype == np.float32
    assert len(audio) == int(1.1 * RATE) + int(0.8 * RATE) + int(1.1 * RATE)  # padding kept


def test_trimmed_joins_make_a_pause_as_long_as_written(fake_voice):
    audio = speech.turn(["one", 0.8, "two"], RATE, trim_joins=True)
    first = speech_bounds(audio[: len(audio) // 2], RATE)
    second = speech_bounds(audio[len(audio) // 2 :], RATE)
    assert first is not None and second is not None
    pause_s = (len(audio) // 2 + second.start - first.end) / RATE
    # The written pause plus the fade kept on each side of it, within the detector's frame.
    assert abs(pause_s - (0.8 + 2 * speech.JOIN_MARGIN_S)) <= 0.035
    assert audio[: int(0.29 * RATE)].max() == 0  # the turn's own leading padding stays


def test_speech_is_a_copy_the_caller_may_change(monkeypatch):
    cached = np.ones(4, np.float32)
    monkeypatch.setattr(speech, "_synthesize", lambda text, rate: cached)
    speech.speech("x")[:] = 0
    assert speech.speech("x").tolist() == [1.0] * 4
    assert speech.silence(0.5).shape == (RATE // 2,)
