"""The graceful way out through the interruptions' own methods, on a session with fake engines."""

from __future__ import annotations

from tests.test_session import Harness, quiet, tone
from voice_agent.protocols.events import AgentAudio, Clear, Metrics, ResponseEnded, ResponseStarted, TurnIgnored
from voice_agent.turn_taking.floor import FloorState
from voice_agent.turn_taking.timeline import AudioTimeline
from voice_agent.turn_taking.user_turn import UserTurn

LONG = " ".join(f"w{i}." for i in range(40))


def a_turn(h: Harness, start: int, turn_id: int = 99) -> UserTurn:
    return UserTurn(turn_id, start, start + 3200, speech_ms=200, over_agent=True, timeline=AudioTimeline(), stt=h.stt)


async def test_with_no_answer_a_turn_starts_where_its_speech_does():
    h = Harness()
    assert h.session.interruptions.begin_turn(4800) == (4800, False)
    assert h.session.interruptions.unanswered_start([]) is None
    await h.session.close()


async def test_speech_before_the_answer_is_heard_merges_with_the_answered_turn():
    h = Harness(answer=LONG)
    h.llm.delay = 0.5  # the answer is still being prepared when the user goes on
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(ResponseStarted))
    answered = h.session.floor.answer
    assert answered is not None and answered.turn_start is not None
    assert answered.heard_nothing and not h.of(AgentAudio)
    assert h.session.interruptions.unanswered_start([]) == answered.turn_start
    start, over_agent = h.session.interruptions.begin_turn(answered.turn_start + 20000)
    assert (start, over_agent) == (answered.turn_start, False)
    assert h.session.floor.state is FloorState.LISTENING
    assert [e.merged for e in h.of(TurnIgnored)] == [True]
    assert not h.of(ResponseEnded)  # told once the new turn is announced
    await h.session.close()


async def test_within_the_grace_the_answer_pauses_and_withdrawing_it_reports_the_overlap():
    h = Harness(answer=LONG, reply_grace_ms=5000)
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: len(h.of(AgentAudio)) >= 10)
    answered = h.session.floor.answer
    assert answered is not None and answered.turn_start is not None
    start, over_agent = h.session.interruptions.begin_turn(answered.turn_start + 20000)
    assert start == answered.turn_start + 20000 and over_agent  # a turn of its own, until it proves to be words
    assert h.session.interruptions.take_grace(answered) and not h.session.interruptions.take_grace(
        answered
    )  # its turn's, once
    assert h.session.interruptions.unanswered_start([]) == answered.turn_start
    turn = a_turn(h, answered.turn_start + 20000)
    h.session.interruptions.withdraw(turn, answered.turn_start)
    assert turn.start == answered.turn_start and not turn.may_withdraw
    assert h.session.floor.state is FloorState.LISTENING and h.of(Clear)
    withdrawn = [m.values for m in h.of(Metrics) if m.values.get("withdrawn")]
    assert len(withdrawn) == 1 and withdrawn[0]["overlap_ms"] > 0
    assert round(h.session.interruptions.overlap_ms_total, 1) == withdrawn[0]["overlap_total_ms"]
    await h.session.close()
