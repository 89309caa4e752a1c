import numpy as np
import pytest

from voice_agent.audio import (
    StreamResampler,
    alaw_decode,
    alaw_encode,
    float_to_pcm16,
    mulaw_decode,
    mulaw_encode,
    pcm16_to_float,
    resample,
)


def tone(freq: float, rate: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)]


def test_pcm16_round_trip_and_clipping():
    samples = np.array([0.0, 0.5, -0.5, 0.999, -1.0, 1.5, -1.5], dtype=np.float32)
    data = float_to_pcm16(samples)
    assert len(data) == 2 * len(samples)
    assert np.frombuffer(data, "<i2").tolist() == [0, 16384, -16384, 32735, -32768, 32767, -32768]
    back = pcm16_to_float(data)
    assert back.dtype == np.float32
    assert np.allclose(back[:5], samples[:5], atol=1 / 32768)


@pytest.mark.parametrize("in_rate, out_rate", [(8000, 16000), (16000, 8000), (48000, 16000), (22050, 24000)])
def test_resample_keeps_pitch_and_length(in_rate, out_rate):
    out = resample(tone(440, in_rate), in_rate, out_rate)
    assert abs(len(out) - out_rate) <= 2
    assert abs(dominant_frequency(out, out_rate) - 440) < 3


def test_stream_resampler_matches_one_shot_and_has_no_seams():
    signal = tone(300, 8000, 2.0)
    stream = StreamResampler(8000, 16000)
    pieces = [stream.process(signal[i : i + 160]) for i in range(0, len(signal), 160)]
    pieces.append(stream.process(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(pieces)
    assert abs(len(streamed) - 32000) <= 2
    # A click at a 20 ms seam would show up as a difference from the one-shot result.
    whole = resample(signal, 8000, 16000)
    n = min(len(whole), len(streamed))
    assert np.max(np.abs(streamed[100 : n - 100] - whole[100 : n - 100])) < 1e-3


def test_stream_resampler_passes_through_at_equal_rates():
    samples = tone(200, 16000, 0.1)
    assert StreamResampler(16000, 16000).process(samples) is samples


def test_mulaw_round_trip_error_is_within_g711_quantisation():
    pcm = np.arange(-32768, 32768, 7, dtype=np.int32).astype(np.int16)
    decoded = mulaw_decode(mulaw_encode(pcm)).astype(np.int32)
    error = np.abs(decoded - pcm.astype(np.int32))
    # The quantisation step doubles per segment: at most 1/16 of the magnitude, plus the bias.
    assert np.all(error <= np.abs(pcm.astype(np.int32)) // 16 + 8)


def test_alaw_is_bit_exact_with_the_g711_reference():
    audioop = pytest.importorskip("audioop")  # Sun's g711.c, as in the ITU-T G.191 reference; gone in Python 3.13
    pcm = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
    assert alaw_encode(pcm) == audioop.lin2alaw(pcm.astype("<i2").tobytes(), 2)
    codes = bytes(range(256))
    assert alaw_decode(codes).tolist() == np.frombuffer(audioop.alaw2lin(codes, 2), "<i2").tolist()


def test_alaw_round_trip_error_is_within_g711_quantisation():
    pcm = np.arange(-32768, 32768, 7, dtype=np.int32).astype(np.int16)
    error = np.abs(alaw_decode(alaw_encode(pcm)).astype(np.int32) - pcm.astype(np.int32))
    assert np.all(error <= np.maximum(np.abs(pcm.astype(np.int32)) // 32, 8) + 1)
