"""The replay client's noise floor: its level, its colour, and that it loops without a seam."""

from __future__ import annotations

import numpy as np

from voice_agent.replay.noise import LOOP_S, NoiseFloor, pink_noise

RATE = 16000


def rms_dbfs(samples: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(samples.astype(np.float64) ** 2))))


def test_pink_noise_has_its_level_and_equal_energy_per_octave():
    noise = pink_noise(10 * RATE, -45.0, seed=3)
    assert abs(rms_dbfs(noise) - -45.0) < 0.01
    power = np.abs(np.fft.rfft(noise)) ** 2
    hz = np.fft.rfftfreq(len(noise), 1 / RATE)
    octaves = [power[(hz >= low) & (hz < 2 * low)].sum() for low in (125, 250, 500, 1000, 2000, 4000)]
    assert max(octaves) / min(octaves) < 1.5, octaves  # white noise would double its energy every octave


def test_the_noise_floor_streams_the_same_noise_frame_by_frame_and_loops_without_a_seam():
    floor = NoiseFloor(RATE, -50.0)
    frames = np.concatenate([floor.next(320) for _ in range(int(LOOP_S * RATE) // 320 + 50)])
    loop = pink_noise(int(LOOP_S * RATE), -50.0)
    assert np.array_equal(frames[: len(loop)], loop)
    assert np.array_equal(frames[len(loop) :], loop[: len(frames) - len(loop)])
    steps = np.abs(np.diff(frames))
    seam = abs(float(loop[0]) - float(loop[-1]))
    assert seam <= np.percentile(steps, 99.9)  # the jump where it loops is no louder than its own steps
