"""The barge-in rule: pause, check, force; and what counts as an acknowledgement."""

from __future__ import annotations

import pytest

from voice_agent.config import Settings
from voice_agent.turn_taking.barge_in import BARGE_RECHECK_MS, BargeIn, BargeInPolicy


def policy(backchannels=("yeah", "mm hm", "mm", "okay", "i see")) -> BargeInPolicy:
    return BargeInPolicy(min_speech_ms=150, check_ms=250, force_ms=900, backchannels=backchannels)


@pytest.mark.parametrize(
    "text, cut_off",
    [
        ("x", True),  # Whisper's reading of the first 200 ms of "Actually"
        ("K.", True),
        ("N", False),  # the hum of a "mm-hmm"
        ("m", False),
        ("I", False),  # a word
        ("a", False),
        ("x y", False),
        ("Actually", False),
        ("", False),
    ],
)
def test_a_consonant_alone_is_a_word_cut_off(text, cut_off):
    assert BargeInPolicy.is_cut_off(text) is cut_off


@pytest.mark.parametrize(
    "speech_ms, checked_ms, checking, expected",
    [
        (100, 0, False, BargeIn.NONE),  # too short to matter
        (150, 0, False, BargeIn.PAUSE),  # fall silent while it may be an interruption
        (249, 0, False, BargeIn.PAUSE),  # too little speech to tell words from "uh-huh"
        (250, 0, False, BargeIn.CHECK),
        (300, 250, True, BargeIn.PAUSE),  # one check at a time
        (300, 250, False, BargeIn.PAUSE),  # not enough new speech since the last check
        (250 + BARGE_RECHECK_MS, 250, False, BargeIn.CHECK),
        (900, 250, True, BargeIn.INTERRUPT),  # long enough whatever the words
    ],
)
def test_pause_check_and_force(speech_ms, checked_ms, checking, expected):
    assert policy().decide(speech_ms, checked_ms, checking) is expected


def test_without_backchannels_any_speech_past_the_minimum_interrupts():
    rule = policy(backchannels=["", " "])
    assert rule.decide(100, 0, False) is BargeIn.NONE
    assert rule.decide(150, 0, False) is BargeIn.INTERRUPT
    assert not rule.is_backchannel("yeah") and rule.is_backchannel("")


@pytest.mark.parametrize(
    "text, acknowledgement",
    [
        ("Yeah, yeah, yeah.", True),
        ("Mm-hm.", True),
        ("Okay.", True),
        ("I see.", True),
        ("Thank you.", True),  # thanks for the answer, or Whisper's reading of a noise
        ("Thanks, but I need the address.", False),
        ("", True),  # a cough or a door: no words
        ("N", True),  # Whisper's "Mm-hmm." after 250 ms
        ("Nm.", True),  # and its other spellings of the hum
        ("NMO", True),
        ("N M M.", True),
        ("No.", False),
        ("Mom!", False),
        ("I", False),  # "I ...": the start of an interruption
        ("Yeah, but what about Paris?", False),
        ("I see a problem.", False),
        ("Stop.", False),
        ("Thank you for watching.", True),  # Whisper's reading of a door slam over the echo
        ("Thanks for watching, but what about Paris?", False),
        ("I'm gonna go to the end of the video.", True),  # its reading of a laugh over the echo
        ("I'm going to the end of the street.", False),
    ],
)
def test_what_counts_as_an_acknowledgement(text, acknowledgement):
    rule = BargeInPolicy.from_settings(Settings())  # the default backchannels
    assert rule.is_backchannel(text) is acknowledgement


@pytest.mark.parametrize(
    "text, lone",
    [
        ("Out", True),  # Whisper's reading of an "uh-huh" over the echo
        ("down.", True),
        ("I'm", True),
        ("Wait.", False),  # words that stop a speaker on their own
        ("No!", False),
        ("Hold", False),
        ("Sorry...", False),
        ("Actually", False),
        ("cancelled.", False),  # Whisper's "Cancel that" over the echo
        ("now", True),  # "no" stops a speaker; "now" alone does not
        ("That's it.", False),
        ("", False),
    ],
)
def test_a_lone_word_is_one_that_does_not_stop_a_speaker_alone(text, lone):
    assert BargeInPolicy.is_lone_word(text) is lone


@pytest.mark.parametrize(
    "speech_ms, checked_ms, checking, expected",
    [
        (150, 0, False, BargeIn.NONE),  # its own voice came back before: no pause for it
        (250, 0, False, BargeIn.LISTEN),  # the words are checked while it goes on
        (300, 250, True, BargeIn.NONE),
        (900, 250, True, BargeIn.NONE),  # its echo lasts as long as it talks: the words decide
        (900, 250, False, BargeIn.LISTEN),
    ],
)
def test_after_an_echo_the_words_are_checked_before_the_agent_pauses(speech_ms, checked_ms, checking, expected):
    assert policy().decide(speech_ms, checked_ms, checking, echo_heard=True) is expected


def test_own_voice_is_what_the_answer_was_playing_then():
    chunks = [("We have a lot of different dishes,", 0.0, 2.0), ("from fresh pasta to grilled fish.", 2.2, 4.4)]
    assert BargeInPolicy.is_own_voice("fresh pasta to", chunks, playing_s=3.4, spoken_s=0.8)
    assert not BargeInPolicy.is_own_voice("Wait, I have a question.", chunks, playing_s=3.4, spoken_s=0.8)


@pytest.mark.parametrize(
    "text, stops",
    [
        ("No, I meant Friday.", True),
        ("Wait, what?", True),
        ("Cancelled.", True),
        ("in the thumb.", False),
        ("What about the soup?", True),  # "what" stops a speaker
        ("You're just a bit", False),
        ("enough.", False),  # a "mm-hmm" over the echo, as Whisper read it
        ("", False),
    ],
)
def test_a_stop_word_anywhere_in_the_words(text, stops):
    assert BargeInPolicy.has_stop_word(text) is stops
