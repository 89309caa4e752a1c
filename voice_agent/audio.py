"""Audio sample formats: PCM16 bytes, float32 arrays, μ-law, and resampling.

The pipeline works on float32 mono in [-1, 1]. Wire formats are PCM16
little-endian or G.711 μ-law or A-law, converted here and nowhere else.
"""

from __future__ import annotations

import numpy as np
import soxr

PIPELINE_RATE = 16000
SUPPORTED_RATES = (8000, 16000, 24000, 48000)


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes to float32 in [-1, 1). ``len(data)`` must be even."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """float32 samples to int16, clipping out-of-range values."""
    return np.round(np.clip(samples * 32768.0, -32768, 32767)).astype(np.int16)


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """float32 samples to little-endian PCM16 bytes, clipping out-of-range values."""
    return float_to_int16(samples).astype("<i2", copy=False).tobytes()


class StreamResampler:
    """Resamples a stream chunk by chunk, keeping filter state between chunks.

    Resampling each chunk on its own would click at every chunk boundary; the
    soxr stream carries the filter's history across calls instead.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ"):
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None if in_rate == out_rate else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        )

    def process(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        if self._stream is None:
            return samples.astype(np.float32, copy=False)
        return self._stream.resample_chunk(samples.astype(np.float32, copy=False), last=last)


def resample(samples: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """Resample a whole signal at once."""
    if in_rate == out_rate:
        return samples.astype(np.float32, copy=False)
    return soxr.resample(samples.astype(np.float32, copy=False), in_rate, out_rate).astype(np.float32, copy=False)


# G.711 μ-law, bit-exact with the ITU-T G.191 reference implementation (g711.c):
# 14-bit magnitude with a bias of 0x84, 8 segments, bits inverted on the wire.
_MULAW_BIAS = 0x84
_MULAW_CLIP = 32635


def _build_mulaw_decode_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


_MULAW_DECODE = _build_mulaw_decode_table()


def mulaw_decode(data: bytes) -> np.ndarray:
    """μ-law bytes to int16 samples."""
    return _MULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def mulaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples to μ-law bytes."""
    pcm = samples.astype(np.int32)
    sign = np.where(pcm < 0, 0x80, 0)
    # Negative values use the one's complement, as in the ITU-T G.191 reference
    # (``ulaw_compress``): -1 codes as negative zero, and the decision levels
    # are symmetric. ``abs`` would move every negative boundary by one.
    magnitude = np.minimum(np.where(pcm < 0, ~pcm, pcm), _MULAW_CLIP) + _MULAW_BIAS
    # The segment is the position of the highest set bit above bit 7.
    exponent = np.clip(np.floor(np.log2(magnitude)).astype(np.int32) - 7, 0, 7)
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    code = ~(sign | (exponent << 4) | mantissa) & 0xFF
    return code.astype(np.uint8).tobytes()


# G.711 A-law, bit-exact with the ITU-T G.191 reference implementation (g711.c):
# 13-bit magnitude, 8 segments, even bits inverted on the wire (XOR 0x55).
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _build_alaw_decode_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (codes & 0x70) >> 4
    magnitude = ((codes & 0x0F) << 4) + np.where(segment == 0, 8, 0x108)
    magnitude = np.where(segment > 1, magnitude << np.maximum(segment - 1, 0), magnitude)
    return np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)


_ALAW_DECODE = _build_alaw_decode_table()


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes to int16 samples."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples to A-law bytes."""
    pcm = samples.astype(np.int32) >> 3
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    # Negative values use the one's complement, as in the reference (``alaw_compress``).
    magnitude = np.where(pcm >= 0, pcm, -pcm - 1)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)
    shift = np.where(segment < 2, 1, segment)
    code = np.where(
        segment >= 8,
        0x7F,
        (np.minimum(segment, 7) << 4) | ((magnitude >> shift) & 0x0F),
    )
    return (code ^ mask).astype(np.uint8).tobytes()
