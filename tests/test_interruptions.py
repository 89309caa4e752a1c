"""Speech over the agent through Interruptions' own methods, on a session with fake engines."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from tests.test_session import Harness, answer_playing, quiet, tone
from voice_agent.engines.vad import WINDOW
from voice_agent.protocols.events import AgentAudio, ResponseEnded, TurnIgnored
from voice_agent.turn_taking.answer import Hold
from voice_agent.turn_taking.barge_in import BargeIn
from voice_agent.turn_taking.floor import Pause
from voice_agent.turn_taking.user_turn import UserTurn

ANSWER = "One two three. Four five six."


def a_turn(h: Harness, over_agent: bool = False) -> UserTurn:
    """A turn of 0.5 s of speech that begins now."""
    timeline = h.session.listener.timeline
    start = timeline.received
    return UserTurn(42, start, start + 16 * WINDOW, speech_ms=500, over_agent=over_agent, timeline=timeline, stt=h.stt)


async def test_turns_without_words_for_the_agent_are_ignored_and_said_so():
    h = Harness()
    interruptions = h.session.interruptions
    assert interruptions.not_for_agent(a_turn(h), "  ")
    assert interruptions.not_for_agent(a_turn(h, over_agent=True), "Mm-hm.")
    assert [e.turn for e in h.of(TurnIgnored)] == [42, 42]
    assert not interruptions.not_for_agent(a_turn(h), "Mm-hm.")  # not over the agent: an answer to it
    assert not interruptions.not_for_agent(a_turn(h, over_agent=True), "Wait, what about Tuesday?")
    assert len(h.of(TurnIgnored)) == 2 and not interruptions.echo_heard
    await h.session.close()


async def the_answer_played(h: Harness) -> None:
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(ResponseEnded))


async def test_the_last_answers_words_coming_back_right_after_it_are_its_echo():
    h = Harness(answer=ANSWER)
    await the_answer_played(h)
    interruptions = h.session.interruptions
    assert interruptions.echoes_last_answer(a_turn(h), "five six")
    assert not interruptions.echoes_last_answer(a_turn(h), "What about Tuesday?")
    assert interruptions.not_for_agent(a_turn(h), "five six") and interruptions.echo_heard
    assert not h.of(TurnIgnored)  # its own voice is dropped without a word to the client
    await h.session.close()


async def test_in_a_call_known_free_of_echo_the_last_answers_words_right_after_it_are_the_users():
    h = Harness(answer=" ".join(f"w{i}." for i in range(30)))
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(AgentAudio))
    while not h.of(ResponseEnded):
        await h.feed(quiet(0.1))  # the input silent under the whole answer: no echo comes back in this call
    assert not h.session.interruptions.echoes_last_answer(a_turn(h), "w28. w29.")
    await h.session.close()


async def test_an_acknowledgement_that_runs_into_the_answers_echo_is_still_an_acknowledgement():
    h = Harness(answer=ANSWER)
    await the_answer_played(h)
    interruptions = h.session.interruptions
    # "Yeah" over the agent, then its last words coming back: the turn is committed after the answer ended.
    assert interruptions.not_for_agent(a_turn(h, over_agent=True), "Yeah, five six.")
    assert h.of(TurnIgnored)
    assert not interruptions.not_for_agent(a_turn(h, over_agent=True), "Yeah, but what about Tuesday?")
    await h.session.close()


async def test_with_echo_ignoring_off_its_words_are_the_users():
    h = Harness(answer=ANSWER, barge_in_ignore_echo=0)
    await the_answer_played(h)
    assert not h.session.interruptions.echoes_last_answer(a_turn(h), "five six")
    await h.session.close()


async def test_speech_while_the_agent_is_silent_is_not_checked():
    h = Harness()
    turn = a_turn(h)
    h.session.interruptions.user_speaks(turn)
    assert turn.barge_check is None and h.stt.calls == 0
    await h.session.close()


@pytest.mark.parametrize("reading", ["over the line.", "One."])
async def test_words_the_agent_is_held_for_over_the_echo_wait_for_the_turns_end(monkeypatch, reading):
    # Over the echo, "over the line." (and "One.") for a "Hold on, what time is it open?" held the agent; the
    # next check found no speech past it once the echo was out (the suppressor took the user's next 160 ms for
    # echo), and the agent went on until the check after (scripts/bargein_eval's echo rig).
    h, _ = await answer_playing(monkeypatch)
    interruptions, reply = h.session.interruptions, h.session.reply
    turn = a_turn(h, over_agent=True)
    h.session.listener.turn = turn  # it goes on
    silence = np.zeros(16 * WINDOW, np.float32)
    echo = (silence, silence, 0, len(silence))
    speech = np.ones(16, bool)
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (silence + 0.1, speech))
    h.stt.text = reading
    h.session.floor.transition(Pause(h.session.floor.answer, Hold.TURN, "test"))
    await interruptions._check(turn, silence, echo)
    assert reply.paused and interruptions.holds_word(turn)
    await interruptions._check(turn, silence, echo)  # the same speech, none since
    assert reply.paused
    # Once the turn ends its whole reading decides: here no speech at all once the echo is out.
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (None, np.zeros(16, bool)))
    h.session.listener.turn = None
    await interruptions._check(turn, silence, echo, whole=True)
    assert not reply.paused
    await h.session.close()


@pytest.mark.parametrize("new_windows, pauses", [(2, False), (3, True)])
async def test_a_turn_the_check_found_only_echo_in_pauses_the_agent_only_for_speech_past_it(
    monkeypatch, new_windows, pauses
):
    # Over a loud echo (-10 dB), what is left of it once it is out passed one look for speech and not the
    # next: the check found no speech and resumed the agent, and the next look paused it again for 350 ms
    # (scripts/bargein_eval's echo rig).
    h, _ = await answer_playing(monkeypatch)
    interruptions, reply = h.session.interruptions, h.session.reply
    turn = a_turn(h, over_agent=True)
    h.session.listener.turn = turn
    checked = np.zeros(16 * WINDOW, np.float32)
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (None, np.zeros(16, bool)))
    h.session.floor.transition(Pause(h.session.floor.answer, Hold.TURN, "test"))
    await interruptions._check(turn, checked, (checked, checked, 0, len(checked)))
    assert not reply.paused
    # The turn goes on: the residue's windows before the check's end, and new ones past it.
    speech = np.zeros(24, bool)
    speech[10:14] = True
    speech[16 : 16 + new_windows] = True
    grown = np.zeros(24 * WINDOW, np.float32)
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (grown + 0.1, speech))
    await interruptions._act_on_speech(h.session.floor.answer, turn, (grown, grown, 0, len(grown)), BargeIn.PAUSE)
    assert reply.paused is pauses
    await h.session.close()


async def onset_over_echo(monkeypatch) -> tuple[Harness, UserTurn]:
    """A playing answer, paused at the onset of a turn over it whose input may hold the answer's echo."""
    h, _ = await answer_playing(monkeypatch)
    interruptions = h.session.interruptions
    monkeypatch.setattr(interruptions, "_no_echo_before", lambda start: False)
    turn = a_turn(h, over_agent=True)
    h.session.listener.turn = turn
    interruptions.speech_begins(turn.start)
    return h, turn


async def test_an_onset_over_the_echo_stays_paused_through_a_first_look_without_speech(monkeypatch):
    # The user's first 100 ms over a loud echo can leave no speech once the echo is out, and the next window
    # some: resumed at once, the agent talked 50 ms between the two (scripts/bargein_eval's echo rig).
    h, turn = await onset_over_echo(monkeypatch)
    interruptions, reply = h.session.interruptions, h.session.reply
    assert reply.paused
    silence = np.zeros(16 * WINDOW, np.float32)
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (None, np.zeros(16, bool)))
    await interruptions._act_on_speech(h.session.floor.answer, turn, (silence, silence, 0, len(silence)), BargeIn.PAUSE)
    assert reply.paused
    await asyncio.sleep(h.settings.output_lead_ms / 1000 + 0.05)
    assert not reply.paused  # no speech came: the pause ends with the output lead the client still played
    await h.session.close()


@pytest.mark.parametrize("speech_left", [True, False])
async def test_an_onsets_pause_that_runs_out_during_a_look_with_the_echo_out_waits_for_it(monkeypatch, speech_left):
    # "Sorry, can you repeat that?": the onset's pause ran out 50 ms before the look at its turn found speech
    # with the echo out, and the agent talked in between (scripts/bargein_eval's echo rig).
    h, turn = await onset_over_echo(monkeypatch)
    interruptions, reply = h.session.interruptions, h.session.reply
    lead_s = h.settings.output_lead_ms / 1000
    audio = np.zeros(16 * WINDOW, np.float32)
    speech = np.ones(16, bool) if speech_left else np.zeros(16, bool)

    def slow_look(*echo):
        time.sleep(lead_s + 0.3)  # the look outlasts the onset's pause by far
        return (audio + 0.1 if speech_left else None), speech

    monkeypatch.setattr(interruptions, "_speech_without_echo", slow_look)
    interruptions._look = asyncio.create_task(
        interruptions._act_on_speech(h.session.floor.answer, turn, (audio, audio, 0, len(audio)), BargeIn.PAUSE)
    )
    await asyncio.sleep(lead_s + 0.02)
    assert reply.paused  # its timer ran out; the look decides
    await interruptions._look
    assert reply.paused is speech_left
    await h.session.close()


async def test_an_earlier_onsets_timer_does_not_end_a_later_onsets_pause(monkeypatch):
    # "No" faded and resumed the agent, "that's" paused it again, and the first onset's timer resumed it 20 ms
    # into that pause (scripts/bargein_eval's echo rig).
    h, _ = await answer_playing(monkeypatch, output_lead_ms=400)  # a long lead: wide margins for the timers
    interruptions, reply = h.session.interruptions, h.session.reply
    monkeypatch.setattr(interruptions, "_no_echo_before", lambda start: False)  # its echo may be in the input
    interruptions.speech_begins(0)
    interruptions.speech_faded()
    assert reply.paused  # held a little for more speech (ONSET_HOLD_S)
    await asyncio.sleep(0.2)
    assert not reply.paused
    interruptions.speech_begins(0)
    await asyncio.sleep(0.3)  # past the first onset's lead by 100 ms, 100 ms short of the second's
    assert reply.paused
    await asyncio.sleep(0.3)
    assert not reply.paused  # the second onset's own lead ended it
    await h.session.close()


@pytest.mark.parametrize("speech_left", [False, True])
async def test_speech_held_at_the_onset_over_the_echo_ends_the_pause_if_none_is_left_with_the_echo_out(
    monkeypatch, speech_left
):
    # Echo windows about 60 ms apart held an answer silent for 240 ms, each fade's next window keeping the pause
    # (scripts/bargein_eval's echo rig, seed 7); a user's first syllables over the echo must keep it.
    h, _ = await answer_playing(monkeypatch, output_lead_ms=400)  # a long lead: the look, not the timer, decides
    interruptions, reply = h.session.interruptions, h.session.reply
    monkeypatch.setattr(interruptions, "_no_echo_before", lambda start: False)  # its echo may be in the input
    audio = np.zeros(8 * WINDOW, np.float32)
    looked: list[int] = []

    def echo_between(start, end):
        looked.append(start)
        return audio, audio, 0, len(audio)

    speech = np.zeros(8, bool)
    speech[3:5] = speech_left
    monkeypatch.setattr(interruptions, "_echo_between", echo_between)
    monkeypatch.setattr(interruptions, "_speech_without_echo", lambda *echo: (None, speech))
    interruptions.speech_begins(1234)
    interruptions.speech_faded()
    interruptions.speech_begins(5678)  # within the hold: the pause goes on, and the run since the onset is looked at
    assert reply.paused
    await asyncio.sleep(0.05)
    assert looked == [1234]
    assert reply.paused is speech_left
    await h.session.close()
