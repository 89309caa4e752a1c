"""The audio timeline: sample indices, trimming, where speech ends and when audio arrived."""

from __future__ import annotations

import numpy as np

from tests.test_session import tone
from voice_agent.engines.vad import WINDOW
from voice_agent.turn_taking.timeline import AudioTimeline

RATE = 16000
FRAME = 320  # 20 ms


def test_slices_are_addressed_by_sample_index_and_survive_trimming():
    timeline = AudioTimeline(clock=lambda: 0.0)
    audio = np.arange(10 * FRAME, dtype=np.float32)
    for start in range(0, len(audio), FRAME):
        timeline.append(audio[start : start + FRAME])
    assert timeline.received == 10 * FRAME and timeline.start == 0
    assert np.array_equal(timeline.slice(100, 200), audio[100:200])
    timeline.trim(3 * FRAME)
    assert timeline.start == 3 * FRAME
    assert np.array_equal(timeline.slice(3 * FRAME, 4 * FRAME), audio[3 * FRAME : 4 * FRAME])
    assert np.array_equal(
        timeline.slice(0, 3 * FRAME + 5), audio[3 * FRAME : 3 * FRAME + 5]
    )  # the trimmed part is gone
    timeline.trim(FRAME)  # never backwards
    assert timeline.start == 3 * FRAME
    slice_ = timeline.slice(5 * FRAME, 6 * FRAME)
    slice_[:] = -1  # a copy: the timeline keeps its audio
    assert np.array_equal(timeline.slice(5 * FRAME, 6 * FRAME), audio[5 * FRAME : 6 * FRAME])


def test_speech_end_is_refined_inside_the_last_vad_window():
    timeline = AudioTimeline(clock=lambda: 0.0)
    timeline.append(np.concatenate([tone(1.0), np.zeros(RATE // 2, np.float32)]))
    true_end = RATE
    window_end = (true_end // WINDOW + 1) * WINDOW  # the VAD's speech window reaches past the end
    assert window_end - true_end > WINDOW // 4
    assert abs(timeline.refine_end(window_end) - true_end) <= WINDOW // 4
    assert timeline.refine_end(0) == 0  # no audio to look at


def feed(times: list[float]) -> AudioTimeline:
    now = [0.0]
    timeline = AudioTimeline(clock=lambda: now[0])
    for at in times:
        now[0] = at
        timeline.append(tone(0.02))
    return timeline


def test_arrival_time_ignores_our_own_stalls():
    sample = 55 * FRAME
    # Ten frames held up by a busy loop, then processed all at once.
    stalled = feed([i * 0.02 if not 50 <= i < 60 else 1.25 for i in range(100)])
    assert abs(stalled.arrival_time(sample) - sample / RATE) < 0.021
    fast = feed([10.0 + i * 0.001 for i in range(100)])  # a client faster than real time
    assert abs(fast.arrival_time(sample) - (10.0 + 55 * 0.001)) < 0.0011


def test_trimming_keeps_the_arrival_times_the_kept_audio_needs():
    timeline = feed([i * 0.02 for i in range(100)])
    timeline.trim(90 * FRAME)
    assert abs(timeline.arrival_time(95 * FRAME) - 95 * FRAME / RATE) < 0.021
