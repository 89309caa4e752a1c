"""The endpointing eval's groups and the overlap figure (voice_agent/replay/turn_groups.py)."""

from pathlib import Path

import numpy as np
import pytest

from voice_agent.replay.measure import AudioIn, MessageIn
from voice_agent.replay.turn_groups import GROUPS, load_groups, overlap_ms, summarise_groups, voiced_playback

TURNS = Path(__file__).resolve().parent.parent / "voice_agent" / "bench" / "turns" / "endpoint_turns"


def frames(at: float, count: int, peak: float = 0.3) -> list[AudioIn]:
    """``count`` 20 ms frames arriving together at ``at``."""
    return [AudioIn(at, 0.02, peak) for _ in range(count)]


def test_voiced_playback_queues_frames_skips_silence_and_stops_at_clear():
    received = [*frames(1.0, 2, peak=0.0), *frames(1.0, 10), MessageIn(1.1, "clear"), *frames(2.0, 5)]
    assert voiced_playback(received) == [(1.04, 1.1), (2.0, pytest.approx(2.1))]


def test_overlap_is_the_agent_voice_inside_the_pauses_only():
    received = frames(1.0, 25)  # voice from 1.0 to 1.5 s
    # The user paused 0.8 to 1.2 s and 1.4 to 2.0 s: 200 ms + 100 ms of voice heard in the pauses.
    assert overlap_ms(received, [(0.8, 1.2), (1.4, 2.0)]) == pytest.approx(300.0)
    assert overlap_ms(received, [(0.1, 0.9)]) == 0.0


def turn(group: str, pauses: list[float], overlap: float, cut: str | None = None) -> dict:
    return {
        "tags": ["group:" + group],
        "pauses_ms": pauses,
        "overlap_ms": overlap,
        "cut_off": cut,
        "spoke_at_ms": 1.0 if overlap else None,
        "voice_to_voice_ms": 500.0,
        "endpoint_ms": 400.0,
        "final_transcript_ms": 100.0,
    }


def test_each_group_is_summarised_apart_with_its_heard_rate_and_overlap():
    summary = summarise_groups(
        [
            turn("real", [500.0], 120.0, "committed"),
            turn("real", [700.0], 0.0),
            turn("real", [], 0.0),
            turn("words", [900.0], 40.0, "committed"),
        ]
    )
    assert list(summary) == ["real", "words"]
    real = summary["real"]
    assert (real["turns"], real["paused_turns"], real["heard_in_pause"], real["heard_in_pause_rate"]) == (3, 2, 1, 0.5)
    assert real["overlap_ms"]["p50"] == 120.0 and real["false_cutoffs"] == 1
    assert real["endpoint_ms"]["p50"] == 400.0 and real["voice_to_voice_ms"]["n"] == 2
    assert summary["words"]["overlap_ms_total"] == 40.0


def test_load_groups_tags_each_turn_and_limits_each_group():
    script = load_groups(TURNS, GROUPS, 16000, 300, limit=2)
    assert [t.tags[-1] for t in script.turns] == [f"group:{name}" for name in GROUPS for _ in range(2)]
    assert all(t.start.ms == 300 for t in script.turns)
    assert len(load_groups(TURNS, ["real"], 16000, 300).turns) >= 20


def test_the_phone_group_is_the_real_ami_turns_through_mu_law_at_8_khz():
    real = load_groups(TURNS, ["real"], 16000, 300).turns
    phone = load_groups(TURNS, ["phone"], 16000, 300).turns
    ami = [t for t in real if "ami" in t.tags]
    assert [t.name for t in phone] == [f"{t.name}_phone" for t in ami]
    assert all(t.tags[-1] == "group:phone" for t in phone)
    clean, line = ami[0], phone[0]
    assert len(line.audio) == len(clean.audio) and line.speech == clean.speech
    # The line takes the band above 4 kHz away and adds μ-law's quantisation: close, not equal.
    spectrum = np.abs(np.fft.rfft(line.audio))
    high = np.fft.rfftfreq(len(line.audio), 1 / 16000) > 4200
    assert spectrum[high].sum() < 0.01 * spectrum.sum()
    assert 0 < np.abs(line.audio - clean.audio).mean() < 0.1 * np.abs(clean.audio).mean() + 0.01
