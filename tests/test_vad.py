import numpy as np
import pytest

from tests.speech import silence, speech
from voice_agent.engines.vad import WINDOW, SileroVAD

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def vad():
    return SileroVAD()


def probabilities(vad, audio, frame=320):
    stream = vad.stream()
    result = []
    for start in range(0, len(audio), frame):
        result += stream.process(audio[start : start + frame])
    return np.array(result)


def test_silence_and_noise_are_not_speech(vad):
    rng = np.random.default_rng(0)
    assert probabilities(vad, silence(2.0)).max() < 0.1
    assert probabilities(vad, (0.01 * rng.standard_normal(32000)).astype(np.float32)).max() < 0.5


def test_speech_is_found_where_it_is(vad):
    audio = np.concatenate([silence(1.0), speech("The quick brown fox jumps over the lazy dog."), silence(1.0)])
    probs = probabilities(vad, audio)
    assert len(probs) == len(audio) // WINDOW
    speech_windows = np.flatnonzero(probs > 0.5)
    first_s, last_s = speech_windows[0] * WINDOW / 16000, (speech_windows[-1] + 1) * WINDOW / 16000
    speech_len = len(audio) / 16000 - 2.0
    assert 0.9 <= first_s <= 1.3
    assert 1.0 + speech_len - 0.4 <= last_s <= 1.0 + speech_len + 0.2
    assert probs[: int(0.8 * 16000 / WINDOW)].max() < 0.5


def test_frame_size_does_not_change_the_result(vad):
    audio = np.concatenate([speech("Hello there."), silence(0.5)])
    assert np.allclose(probabilities(vad, audio, 320), probabilities(vad, audio, 1000), atol=1e-5)


def test_streams_do_not_share_state(vad):
    audio = speech("Hello there.")
    one, two = vad.stream(), vad.stream()
    first = one.process(audio)
    two.process(silence(1.0))
    assert np.allclose(first, vad.stream().process(audio))
