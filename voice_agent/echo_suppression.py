"""Take the agent's own voice out of input audio before it is transcribed.

When the user speaks over the agent on a speakerphone, the barge-in check's
audio holds both the user's sound and the agent's echo, and Whisper reads
the echo's words into it ("Okay now." for a "yeah" over "...right now").
This attenuates the echo the way a residual echo suppressor does: per
short-time spectrum bin, the echo expected there is the output's spectrum
at the echo path's lag (smeared over the room's length and a block of lag
error either side), scaled by the path's gain per band; bins no louder than
that are mostly echo and are turned down, bins well above it are the user's
and are kept.

Magnitudes, not waveforms: a sample-exact echo canceller needs the
loudspeaker and microphone on one sample clock, which a network client does
not give (frames are played and captured with a few ms of jitter), whereas
a 40 ms spectrum does not mind it. The path's power response per band is fitted
on the audio itself, by least squares of the input's power on the output's
at each delay around the lag, leaving out frames far louder than the fit
(the user's): the check's audio reaches back :data:`FIT_S` before the
overlapping speech, where the echo is alone.
"""

from __future__ import annotations

import numpy as np

HOP = 160  # 10 ms at 16 kHz: the envelope test's block, so its lag applies as it is
FRAME = 4 * HOP  # 40 ms Hann frames at a quarter overlap: they add up to a constant
SMEAR_BEFORE = 6  # hops: the envelope test finds the lag up to 60 ms late when frames arrive in bursts
SMEAR_AFTER = 4  # hops: the room carries the sound on (most of a small room's energy within 40 ms)
BAND_BINS = 16  # bins sharing one fit of the path: 400 Hz bands
LOUD_SHARE = 1e-3  # frames whose output is quieter than this share of the loudest tell nothing of the path
FIT_ROUNDS = 3
OUTLIER = 4.0  # input power over the fitted echo that is someone else (+6 dB): left out of the next fit
OVER_SUBTRACT = 4.0  # power: what is within 6 dB of the predicted echo counts as echo
FLOOR = 0.03  # amplitude kept of an echo bin (-30 dB): Whisper reads words into a -20 dB residue
# Input before the overlapping speech that the fit of the path is made on: mostly echo alone.
FIT_S = 1.0


def _frames(audio: np.ndarray) -> np.ndarray:
    """Hann-windowed spectra of ``audio`` every :data:`HOP` (its length a multiple of it)."""
    padded = np.concatenate([np.zeros(FRAME - HOP, np.float32), audio, np.zeros(FRAME - HOP, np.float32)])
    frames = np.lib.stride_tricks.sliding_window_view(padded, FRAME)[::HOP]
    return np.fft.rfft(frames * np.hanning(FRAME + 1)[:FRAME], axis=1)


def _overlap_add(spectra: np.ndarray, length: int) -> np.ndarray:
    frames = np.fft.irfft(spectra, FRAME, axis=1)
    out = np.zeros(len(frames) * HOP + FRAME, np.float64)
    for index, frame in enumerate(frames):
        out[index * HOP : index * HOP + FRAME] += frame
    # A periodic Hann window at a quarter hop sums to 2 everywhere.
    return (out[FRAME - HOP : FRAME - HOP + length] / 2.0).astype(np.float32)


def _echo_power(heard_power: np.ndarray, played_power: np.ndarray, lag: int) -> np.ndarray:
    """The echo power expected in each input frame and bin: per band, a fit of the input's power to the output's
    power at each delay around ``lag``, on the frames it explains (a user's voice, louder, is left out)."""
    count, bins = played_power.shape
    delays = range(max(0, lag - SMEAR_BEFORE), lag + SMEAR_AFTER + 1)
    # Row d: the output's power d frames late.
    shifted = np.zeros((len(delays), count, bins))
    for row, delay in enumerate(delays):
        if delay < count:
            shifted[row, delay:] = played_power[: count - delay]
    expected = np.zeros((count, bins))
    for band in range(0, bins, BAND_BINS):
        part = slice(band, band + BAND_BINS)
        inputs = shifted[:, :, part].sum(axis=2).T  # frames x delays
        target = heard_power[:, part].sum(axis=1)
        used = inputs.sum(axis=1) > LOUD_SHARE * max(float(inputs.sum(axis=1).max()), 1e-20)
        weights = np.zeros(len(delays))
        for _ in range(FIT_ROUNDS):
            if used.sum() < len(delays):
                break
            weights = np.clip(np.linalg.lstsq(inputs[used], target[used], rcond=None)[0], 0.0, None)
            used &= target <= OUTLIER * (inputs @ weights) + 1e-20
        expected[:, part] = np.tensordot(weights, shifted[:, :, part], axes=1)
    return expected


def suppress_echo(heard: np.ndarray, played: np.ndarray, lag: int) -> np.ndarray:
    """``heard`` with the echo of ``played`` turned down.

    ``played`` is the output as the client played it over the same span of
    time as ``heard``, and ``lag`` the echo path's delay in :data:`HOP`
    blocks. ``heard`` is returned unchanged when nothing was played.
    """
    length = len(heard) // HOP * HOP
    if length == 0 or not np.any(played[:length]):
        return heard
    heard_spectra = _frames(heard[:length])
    heard_power = np.abs(heard_spectra) ** 2
    echo_power = _echo_power(heard_power, np.abs(_frames(played[:length])) ** 2, lag)
    keep = np.sqrt(np.clip(1.0 - OVER_SUBTRACT * echo_power / np.maximum(heard_power, 1e-20), 0.0, 1.0))
    cleaned = _overlap_add(heard_spectra * np.maximum(keep, FLOOR), length)
    return np.concatenate([cleaned, heard[length:]])
