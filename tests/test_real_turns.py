"""Cutting single-speaker turns from a who-speaks-when reference, and Silero pauses."""

from pathlib import Path

import numpy as np
import pytest

from voice_agent.replay import vad_pauses
from voice_agent.replay.real_turns import Segment, read_rttm, solo_stretches
from voice_agent.replay.script import load_script

REAL = Path(__file__).resolve().parent.parent / "voice_agent" / "bench" / "turns" / "endpoint_turns" / "real"


def spans(stretches):
    return [(s.speaker, round(s.start, 3), round(s.end, 3)) for s in stretches]


def test_a_speaker_change_after_a_silence_ends_a_turn_and_a_pause_inside_does_not():
    segments = [Segment("A", 1.0, 3.0), Segment("A", 3.8, 5.0), Segment("B", 6.0, 8.0), Segment("A", 9.0, 9.5)]
    stretches = solo_stretches(segments, 10.0)
    # A's two segments are one turn (the gap is a pause); B ends at A's reply; A's last words run to nobody.
    assert spans(stretches) == [("A", 1.0, 5.0), ("B", 6.0, 8.0)]
    assert stretches[0].clean_start and stretches[1].clean_start
    assert stretches[0].audio_start == pytest.approx(0.85) and stretches[0].audio_end == pytest.approx(5.15)


def test_a_short_overlap_at_the_end_is_a_handover_cut_at_the_next_speakers_first_word():
    segments = [Segment("A", 1.0, 4.3), Segment("B", 4.0, 7.0), Segment("A", 8.0, 8.5)]
    [a, b] = solo_stretches(segments, 10.0)
    assert (a.start, a.end, a.audio_end) == (1.0, 4.0, 4.0)
    assert (b.start, b.end) == (4.3, 7.0) and not b.clean_start  # starts as A stops talking over it


def test_someone_talking_over_the_speaker_leaves_that_stretch_out():
    # B's "yeah" at 3 s is a backchannel: A goes on for 2 s after it, so A's first stretch has no true end.
    segments = [Segment("A", 1.0, 6.0), Segment("B", 3.0, 3.4), Segment("C", 7.0, 9.0), Segment("A", 9.5, 9.9)]
    assert spans(solo_stretches(segments, 10.0)) == [("A", 3.4, 6.0), ("C", 7.0, 9.0)]


def test_short_replies_and_turns_without_an_end_are_left_out():
    segments = [Segment("A", 0.5, 1.2), Segment("B", 2.0, 9.0)]
    assert solo_stretches(segments, 10.0) == []  # A is under a second; B runs to nobody


def test_read_rttm(tmp_path):
    path = tmp_path / "x.rttm"
    path.write_text("SPEAKER f 1 3.5 1.0 <NA> <NA> B <NA> <NA>\nSPEAKER f 1 1.0 2.0 <NA> <NA> A <NA> <NA>\n")
    assert read_rttm(path) == {"f": [Segment("A", 1.0, 3.0), Segment("B", 3.5, 4.5)]}


def test_pauses_are_gaps_of_at_least_nine_windows_between_speech_windows():
    speech = np.array([1, 1, 0, 0, 0, 1] + [0] * 9 + [1] + [0] * 20, dtype=bool)
    assert vad_pauses.pauses_in(speech) == [(6, 15)]  # the 3-window gap is a break between words


@pytest.mark.models  # Silero
def test_silero_hears_the_pause_cut_into_a_committed_turn():
    script = load_script(str(REAL.parent / "script.yaml"), 16000)
    turn = next(t for t in script.turns if t.name == "lands_at_nine")
    [(start, end)] = vad_pauses.pauses(turn.audio, 16000, 0.5)
    assert 1.4 < (end - start) / 16000 < 1.7


def test_the_committed_real_turns_carry_their_attribution():
    import soundfile

    script = load_script(str(REAL / "script.yaml"), 16000)
    assert {"real"} <= set(script.turns[0].tags)
    assert sum(1 for t in script.turns if "paused" in t.tags) >= 10
    for turn in script.turns:
        with soundfile.SoundFile(turn.source) as audio:
            assert "CC BY 4.0" in audio.copyright or "public domain" in audio.copyright
