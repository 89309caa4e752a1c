"""The turn-taking evals' measurement (voice_agent/replay/endpointing.py, bargein.py) on synthetic timelines."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from voice_agent.replay.bargein import probe_outcome
from voice_agent.replay.bargein import summarise as summarise_probes
from voice_agent.replay.endpointing import cut_off, measure_turn, summarise
from voice_agent.replay.measure import AudioIn, MessageIn
from voice_agent.replay.script import ScriptError, load_script

RATE = 16000


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def gap(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def user_final(at: float, text: str = "I want to go to.") -> MessageIn:
    return MessageIn(at, "transcript", {"role": "user", "text": text, "final": True})


def test_cut_off_by_agent_audio_in_the_pause():
    received = [AudioIn(10.0, 0.02, 0.001), AudioIn(10.5, 0.02, 0.3)]  # the first frame is silence
    cut = cut_off(received, speech_start_at=9.0, speech_end_at=11.0)
    assert cut is not None and cut.kind == "spoke" and cut.at == 10.5


def test_cut_off_by_a_final_user_transcript_before_the_end():
    received = [
        MessageIn(9.5, "transcript", {"role": "user", "text": "I want", "final": False}),  # a partial: fine
        MessageIn(9.8, "transcript", {"role": "agent", "text": "Earlier answer.", "final": True}),
        user_final(10.2, "I want to go to."),
    ]
    cut = cut_off(received, 9.0, 11.0)
    assert cut is not None and (cut.kind, cut.at, cut.text) == ("committed", 10.2, "I want to go to.")


def test_no_cut_off_when_everything_comes_after_the_end():
    received = [user_final(11.3, "I want to go to Boston."), AudioIn(11.8, 0.02, 0.3)]
    assert cut_off(received, 9.0, 11.0) is None
    # ...nor for what came before the user started (the previous answer's tail).
    assert cut_off([AudioIn(8.9, 0.02, 0.3)], 9.0, 11.0) is None


def test_measure_turn_puts_the_cut_off_in_the_pause_it_came_in():
    received = [user_final(10.45), AudioIn(10.9, 0.02, 0.3)]
    figures = {"voice_to_voice_ms": 800.0, "final_transcript_ms": 300.0, "server": {"endpoint_ms": 410.0}}
    turn = measure_turn(
        received, speech_start_at=9.0, speech_end_at=11.5, pauses_at=[(9.5, 9.8), (10.1, 11.0)], figures=figures
    )
    assert turn["cut_off"] == "committed"
    # Committed first, and the answer's voice reached the user before they finished too.
    assert turn["spoke_at_ms"] == pytest.approx(1900.0)
    assert turn["cut_off_pause_ms"] == pytest.approx(900.0)
    assert turn["cut_off_silence_ms"] == pytest.approx(350.0)
    assert turn["cut_off_at_ms"] == pytest.approx(1450.0)
    assert turn["pauses_ms"] == [pytest.approx(300.0), pytest.approx(900.0)]
    # The answer after the true end is still timed.
    assert (turn["voice_to_voice_ms"], turn["endpoint_ms"]) == (800.0, 410.0)


def test_measure_turn_without_cut_off():
    turn = measure_turn(
        [user_final(11.4)],
        speech_start_at=9.0,
        speech_end_at=11.0,
        pauses_at=[(9.5, 10.4)],
        figures={"voice_to_voice_ms": 700.0, "final_transcript_ms": 400.0, "server": None},
    )
    assert turn["cut_off"] is None and turn["cut_off_pause_ms"] is None and turn["spoke_at_ms"] is None
    assert (turn["voice_to_voice_ms"], turn["endpoint_ms"], turn["final_transcript_ms"]) == (700.0, None, 400.0)


def _turn(pauses_ms, cut=None, v2v=500.0, endpoint=400.0, tags=(), spoke_at=None):
    return {
        "pauses_ms": pauses_ms,
        "cut_off": cut,
        "voice_to_voice_ms": v2v,
        "endpoint_ms": endpoint,
        "final_transcript_ms": 300.0,
        "tags": list(tags),
        "spoke_at_ms": spoke_at,
    }


def test_summary_rate_over_paused_turns_and_delays_over_clean_turns():
    turns = [
        _turn([900.0], cut="committed", v2v=5000.0, endpoint=5000.0, tags=["pause-after-cue"]),
        _turn([600.0], cut="committed", tags=["pause-after-sentence"], spoke_at=800.0),
        _turn([700.0], tags=["pause-after-cue"]),
        _turn([1200.0], v2v=None, endpoint=None, tags=["pause-after-cue"]),
        _turn([], v2v=600.0, endpoint=350.0, tags=["whole"]),
        _turn([], cut="committed", tags=["whole"]),
    ]
    s = summarise(turns)
    assert (s["turns"], s["paused_turns"], s["false_cutoffs"]) == (6, 4, 2)
    assert s["false_cutoff_rate"] == 0.5
    assert s["spoke_in_pause"] == 1
    assert s["cutoffs_elsewhere"] == 1
    assert s["unanswered"] == 1
    # Cut-off turns are left out of the delays: their 5 s would otherwise count.
    assert s["voice_to_voice_ms"]["n"] == 2 and s["voice_to_voice_ms"]["max"] == 600.0
    assert s["endpoint_ms"]["p50"] == 375.0
    assert s["by_tag"] == {
        "pause-after-cue": {"turns": 3, "cut_off": 1},
        "pause-after-sentence": {"turns": 1, "cut_off": 1},
        "whole": {"turns": 2, "cut_off": 1},
    }


def test_summary_without_paused_turns_has_no_rate():
    assert summarise([_turn([])])["false_cutoff_rate"] is None


def test_script_tags(tmp_path):
    soundfile.write(tmp_path / "a.wav", np.concatenate([gap(0.2), tone(0.5), gap(0.2)]), RATE)
    (tmp_path / "s.yaml").write_text(
        "turns:\n  - file: a.wav\n    tags: [whole, short]\n  - file: a.wav\n    tags: one\n  - a.wav\n"
    )
    script = load_script(str(tmp_path / "s.yaml"), RATE)
    assert [turn.tags for turn in script.turns] == [("whole", "short"), ("one",), ()]
    (tmp_path / "bad.yaml").write_text("turns:\n  - file: a.wav\n    tags: {a: 1}\n")
    with pytest.raises(ScriptError, match="turn 1: 'tags' must be a list"):
        load_script(str(tmp_path / "bad.yaml"), RATE)


# Barge-in probes (voice_agent/replay/bargein.py).


def frames(start: float, stop: float, peak: float = 0.3) -> list[AudioIn]:
    """Agent frames arriving at real-time pace, 20 ms each, from ``start`` to ``stop``."""
    return [AudioIn(start + i * 0.02, 0.02, peak) for i in range(round((stop - start) / 0.02))]


def test_probe_cleared_stop_time_is_when_the_player_fell_silent():
    received = [*frames(0.0, 2.3), MessageIn(2.4, "clear")]
    outcome = probe_outcome(received, onset=2.0, end=2.6)
    assert outcome["outcome"] == "cleared"
    assert outcome["stop_ms"] == pytest.approx(300.0)  # the frames stopped before the clear came
    assert outcome["clear_ms"] == pytest.approx(400.0)


def test_probe_clear_cuts_queued_audio():
    # Frames arrived ahead of time (a 1 s burst at 1.0 s holds audio until 2.0 s and beyond).
    received = [AudioIn(1.0 + i * 0.001, 0.02, 0.3) for i in range(100)] + [MessageIn(1.5, "clear")]
    outcome = probe_outcome(received, onset=1.2, end=1.6)
    assert outcome["outcome"] == "cleared" and outcome["stop_ms"] == pytest.approx(300.0)


def test_probe_paused_then_resumed_is_not_a_barge_in():
    received = [*frames(0.0, 2.3), *frames(2.9, 5.0)]
    outcome = probe_outcome(received, onset=2.0, end=2.4)
    assert outcome["outcome"] == "paused"
    assert outcome["silent_ms"] == pytest.approx(600.0)
    assert outcome["clear_ms"] is None


def test_probe_kept_talking_stopped_and_not_playing():
    assert probe_outcome(frames(0.0, 6.0), onset=2.0, end=2.5)["outcome"] == "kept talking"
    # A frame 30 ms late is a glitch of the player, not the agent falling silent.
    assert probe_outcome([*frames(0.0, 2.2), *frames(2.25, 6.0)], onset=2.0, end=2.5)["outcome"] == "kept talking"
    assert probe_outcome(frames(0.0, 2.3), onset=2.0, end=2.5)["outcome"] == "stopped"
    # Resuming after the deadline (end + 2 s) is the next answer, not this one going on.
    assert probe_outcome([*frames(0.0, 2.3), *frames(5.0, 6.0)], onset=2.0, end=2.5)["outcome"] == "stopped"
    assert probe_outcome(frames(0.0, 1.0), onset=2.0, end=2.5)["outcome"] == "not playing"


def test_probe_summary_per_kind():
    probes = [
        {"tag": "interruption", "outcome": "cleared", "stop_ms": 300.0, "clear_ms": 400.0},
        {"tag": "interruption", "outcome": "cleared", "stop_ms": 500.0, "clear_ms": 520.0},
        {"tag": "interruption", "outcome": "paused", "stop_ms": 280.0, "clear_ms": None},
        {"tag": "noise", "outcome": "kept talking", "stop_ms": None, "clear_ms": None},
        {"tag": "noise", "outcome": "not playing", "stop_ms": None, "clear_ms": None},
    ]
    s = summarise_probes(probes)
    assert s["interruption"]["outcomes"] == {"cleared": 2, "paused": 1}
    assert s["interruption"]["stop_ms"]["n"] == 2 and s["interruption"]["stop_ms"]["p50"] == 400.0
    assert (s["noise"]["probes"], s["noise"]["judged"]) == (2, 1)


def test_a_clear_after_the_deadline_counts_until_the_next_turn():
    # Paused by a noise until its turn ended, then cleared by its words: 2 s after the deadline (end + 2 s).
    received = [*frames(0.0, 2.3), MessageIn(6.5, "clear")]
    late = probe_outcome(received, onset=2.0, end=2.5, until=8.0)
    assert late["outcome"] == "cleared" and late["clear_ms"] == pytest.approx(4500.0)
    assert probe_outcome(received, onset=2.0, end=2.5, until=6.0)["outcome"] == "stopped"  # the next turn's
    assert probe_outcome(received, onset=2.0, end=2.5)["outcome"] == "stopped"
    # Talking on past the deadline, then cleared before the next turn: cleared too.
    assert (
        probe_outcome([*frames(0.0, 6.0), MessageIn(5.0, "clear")], onset=2.0, end=2.5, until=8.0)["outcome"]
        == "cleared"
    )
