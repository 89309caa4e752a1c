"""Cutting a pause into a whole utterance at a word boundary (voice_agent/replay/word_cuts.py)."""

from pathlib import Path

import numpy as np
import pytest

from voice_agent.replay import vad_pauses
from voice_agent.replay.script import load_script
from voice_agent.replay.word_cuts import Word, best_cut, boundary_time, insert_pauses, spelled

RATE = 16000
WORDS = Path(__file__).resolve().parent.parent / "voice_agent" / "bench" / "turns" / "endpoint_turns" / "words"


def test_spelled_writes_number_words_as_whisper_writes_digits():
    assert spelled("My number is five five, forty two and forty.".split()) == [
        "my", "number", "is", "5", "5", "4", "2", "and", "40",
    ]  # fmt: skip


def test_a_boundary_by_position_when_whisper_heard_as_many_words_even_misheard():
    heard = [Word("I'd", 0.0, 0.2), Word("like", 0.2, 0.4), Word("the", 0.4, 0.5), Word("on", 0.6, 0.8)]
    assert boundary_time("I'd like the um".split(), heard, 3) == (0.5, 0.6)


def test_a_boundary_inside_a_word_that_holds_several_spoken_ones():
    heard = [Word("My", 0.0, 0.2), Word("number", 0.2, 0.5), Word("is", 0.5, 0.6), Word("555-0192.", 0.6, 1.3)]
    start, end = boundary_time("My number is five five five zero one nine two".split(), heard, 6)
    assert start == end == pytest.approx(0.6 + 3 / 7 * 0.7)


def test_a_boundary_after_a_misheard_word_by_aligning_the_letters():
    heard = [Word("I", 0.0, 0.1), Word("love", 0.1, 0.3), Word("at", 0.3, 0.4), Word("42", 0.4, 0.9)]
    heard.append(Word("Elm", 1.0, 1.2))
    assert boundary_time("I live at forty two Elm Street.".split(), heard, 5) == (0.9, 1.0)


def test_best_cut_takes_the_dip_whose_two_sides_transcribe_as_the_words():
    # Three "words" of tone with two silent dips between them; the fake STT names the tones it hears.
    tone = 0.3 * np.sin(np.arange(int(0.3 * RATE)) * 0.2).astype(np.float32)
    gap = np.zeros(int(0.05 * RATE), np.float32)
    audio = np.concatenate([tone, gap, tone, gap, tone])
    starts = [0, len(tone) + len(gap), 2 * (len(tone) + len(gap))]

    def transcribe(piece: np.ndarray) -> str:
        return " ".join(["one", "two", "three"][: max(1, round(len(piece) / (len(tone) + len(gap))))])

    cut = best_cut(audio, RATE, ["one", "two", "three"], 2, around_s=starts[1] / RATE, transcribe=transcribe)
    assert starts[1] + len(tone) <= cut < starts[2]


def test_insert_pauses_adds_the_silence_at_each_cut():
    audio = np.ones(1000, np.float32)
    out = insert_pauses(audio, 1000, [(600, 0.5), (300, 0.2)])
    assert len(out) == 1700
    assert not out[300:500].any() and not out[800:1300].any() and out[150] == 1.0


@pytest.mark.models  # Silero
def test_the_committed_word_turns_pause_where_the_script_says():
    script = load_script(str(WORDS / "script.yaml"), RATE)
    assert len(script.turns) >= 15 and all("words" in t.tags for t in script.turns)
    turn = next(t for t in script.turns if t.name == "go_to_boston")
    [(start, end)] = vad_pauses.pauses(turn.audio, RATE, 0.5)
    assert 0.8 < (end - start) / RATE < 1.1
