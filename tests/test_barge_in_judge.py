"""The barge-in judge as a table: a reading of speech over the agent, and its context, to a verdict."""

from __future__ import annotations

from dataclasses import replace

import pytest

from voice_agent.turn_taking.barge_in import WORDS_OVER_ECHO_MIN_MS, BargeInPolicy, Hearing, Verdict, judge

POLICY = BargeInPolicy(100, 250, 1500, ("yeah", "mm hm", "mm", "okay", "i see", "um"))
# Words read in plenty of speech, with no echo path, part way through a turn outside the grace.
PLAIN = Hearing(
    "",
    no_speech=False,
    spoken_ms=800,
    over_echo=False,
    whole=False,
    may_withdraw=False,
    own_voice=False,
    stop_read_before=False,
)
ECHO = replace(PLAIN, over_echo=True)


@pytest.mark.parametrize(
    "hearing, verdict",
    [
        # Without an echo path.
        (replace(PLAIN, text="Tell me about the soup instead."), Verdict.STOP),
        (replace(PLAIN, text="Wait."), Verdict.STOP),
        (replace(PLAIN, text="Yeah."), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="Mm-hm, okay."), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="Thank you for watching."), Verdict.ACKNOWLEDGEMENT),  # Whisper's noise
        (replace(PLAIN, text=""), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="Soup."), Verdict.WAIT),  # one word: more speech decides
        (replace(PLAIN, text="Soup.", whole=True), Verdict.STOP),  # the whole turn was that word
        (replace(PLAIN, text="x"), Verdict.WAIT),  # a word the check cut off
        (replace(PLAIN, text="x", whole=True), Verdict.ACKNOWLEDGEMENT),  # read whole, a hum
        (replace(PLAIN, text="That's it.", no_speech=True), Verdict.WAIT),  # a noise's first: maybe a syllable
        (replace(PLAIN, text="That's it.", no_speech=True, whole=True), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="No.", no_speech=True, spoken_ms=300), Verdict.STOP),  # a stop word said
        (replace(PLAIN, text="No.", no_speech=True, spoken_ms=96, whole=True), Verdict.ACKNOWLEDGEMENT),  # a slam
        # In the grace, the user is going on: a filler is their next words begun.
        (replace(PLAIN, text="Um.", may_withdraw=True), Verdict.WAIT),
        (replace(PLAIN, text="Um.", may_withdraw=True, whole=True), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="Okay.", no_speech=True, may_withdraw=True, whole=True), Verdict.ACKNOWLEDGEMENT),
        (replace(PLAIN, text="And the chef?", no_speech=True, may_withdraw=True), Verdict.STOP),
        # The agent's own words come back, whatever they are.
        (replace(PLAIN, text="Wait.", own_voice=True), Verdict.OWN_VOICE),
        (replace(ECHO, text="the soup of the day", own_voice=True, whole=True), Verdict.OWN_VOICE),
        # Over the echo.
        (replace(ECHO, text="Out"), Verdict.LONE_WORD),
        (replace(ECHO, text="Out", whole=True), Verdict.LONE_WORD),
        (replace(ECHO, text="Tell me more."), Verdict.WAIT),  # words that stop no one: read again
        (replace(ECHO, text="Tell me more.", whole=True), Verdict.STOP),
        (replace(ECHO, text="It's fine.", whole=True, spoken_ms=WORDS_OVER_ECHO_MIN_MS - 84), Verdict.NOISE),
        (replace(ECHO, text="No."), Verdict.WAIT),  # a first stop word over the echo may be a noise
        (replace(ECHO, text="No.", stop_read_before=True), Verdict.STOP),  # a second one stops the agent
        (replace(ECHO, text="No.", whole=True, spoken_ms=160), Verdict.STOP),  # so does the whole turn's
        (replace(ECHO, text="Yeah."), Verdict.ACKNOWLEDGEMENT),
    ],
)
def test_the_verdict_on_a_reading(hearing, verdict):
    assert judge(hearing, POLICY).verdict is verdict


@pytest.mark.parametrize(
    "hearing, stop_read",
    [
        (replace(ECHO, text="No."), True),
        (replace(ECHO, text="Tell me more."), False),
        (replace(PLAIN, text="No."), False),  # without an echo a stop word stops at once: nothing to remember
        (replace(ECHO, text="Wait.", own_voice=True), False),
    ],
)
def test_a_stop_word_read_over_the_echo_is_remembered_for_the_next_reading(hearing, stop_read):
    assert judge(hearing, POLICY).stop_read is stop_read


def test_a_noise_stands_on_no_words():
    judgement = judge(replace(PLAIN, text="That's it.", no_speech=True, whole=True), POLICY)
    assert judgement.text == ""
    assert judge(replace(PLAIN, text="That's it.", no_speech=True, may_withdraw=True), POLICY).text == "That's it."
