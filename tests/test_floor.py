"""The floor's one transition function, event by event: its state, and what the client is told."""

from __future__ import annotations

import asyncio

import pytest

from voice_agent.protocols.events import (
    CLIENT_CANCELLED,
    TURN_DETECTED,
    AgentState,
    Clear,
    ResponseEnded,
    ResponseStarted,
)
from voice_agent.turn_taking.answer import USER_HOLDS, Answer, Hold
from voice_agent.turn_taking.floor import (
    Announced,
    Close,
    Drop,
    Finish,
    Floor,
    FloorState,
    HandOver,
    Pause,
    Play,
    Prepare,
    Resume,
    Withdraw,
    Yield,
)


class Reply:
    def __init__(self, started_audio: bool = True):
        self.started_audio = started_audio
        self.flowing = False

    def set_flowing(self, flowing: bool) -> None:
        self.flowing = flowing


class Rig:
    def __init__(self):
        self.events: list = []
        self.cut: list = []
        self.floor = Floor(self.events.append, self.cut.append)

    def told(self) -> list:
        """What the client was told since last asked, as (kind, detail)."""
        told = [_shown(e) for e in self.events]
        self.events.clear()
        return told

    def playing(self, started_audio: bool = True) -> tuple[Answer, Reply]:
        answer, reply = Answer(0, 1), Reply(started_audio)
        self.floor.transition(Prepare(answer))
        self.floor.transition(Play(answer, reply))  # type: ignore[arg-type]
        return answer, reply


def _shown(event) -> tuple:
    if isinstance(event, AgentState):
        return ("state", event.state)
    if isinstance(event, ResponseEnded):
        return ("ended", event.status, event.reason)
    if isinstance(event, ResponseStarted):
        return ("started",)
    if isinstance(event, Clear):
        return ("clear",)
    return (type(event).__name__,)


def test_an_answer_prepared_played_and_finished():
    rig = Rig()
    answer = Answer(0, 1)
    rig.floor.transition(Prepare(answer))
    assert rig.floor.state is FloorState.PREPARING and rig.told() == [("state", "thinking")]
    reply = Reply()
    rig.floor.transition(Play(answer, reply))  # type: ignore[arg-type]
    assert rig.floor.state is FloorState.SPEAKING and reply.flowing and answer.number == 1
    assert rig.told() == [("started",), ("state", "speaking")]
    rig.floor.transition(Finish(answer, failed=False))
    assert rig.floor.state is FloorState.LISTENING and answer.ended == ("completed", None)
    assert rig.told() == [("ended", "completed", ""), ("state", "listening")]


def test_holders_pause_it_and_only_the_last_resume_lets_it_flow():
    rig = Rig()
    answer, reply = rig.playing()
    rig.told()
    rig.floor.transition(Pause(answer, Hold.ONSET, "test"))
    rig.floor.transition(HandOver(answer, Hold.ONSET, Hold.TURN))
    rig.floor.transition(Pause(answer, Hold.GRACE_ONSET, "test"))
    assert rig.floor.state is FloorState.PAUSED and not reply.flowing
    rig.floor.transition(Resume(answer, Hold.ONSET, "test"))  # handed over: not its to let go
    assert not reply.flowing
    rig.floor.transition(Resume(answer, Hold.TURN, "test"))
    assert not reply.flowing  # the grace's onset still holds it
    rig.floor.transition(Resume(answer, USER_HOLDS, "test"))
    assert rig.floor.state is FloorState.SPEAKING and reply.flowing
    assert rig.told() == []  # paused or not, the client is told "speaking"


def test_events_for_an_answer_that_is_no_longer_the_one_under_way_change_nothing():
    rig = Rig()
    old, _ = rig.playing()
    rig.floor.transition(Yield())
    new, reply = rig.playing()
    rig.told()
    rig.floor.transition(Pause(old, Hold.TURN, "late"))
    rig.floor.transition(Finish(old, failed=False))
    rig.floor.transition(Drop(old))
    assert rig.floor.answer is new and reply.flowing and rig.told() == []


@pytest.mark.parametrize(
    "event, told, cut",
    [
        (Yield(), [("clear",), ("ended", "cancelled", TURN_DETECTED), ("state", "listening")], True),
        (Yield(CLIENT_CANCELLED), [("clear",), ("ended", "cancelled", CLIENT_CANCELLED), ("state", "listening")], True),
        (Withdraw(), [("clear",), ("ended", "cancelled", TURN_DETECTED), ("state", "listening")], False),
        (Close(), [("ended", "cancelled", TURN_DETECTED), ("state", "listening")], False),
    ],
    ids=["yielded", "client cancelled", "withdrawn", "closed"],
)
async def test_each_way_out_tells_the_client_its_own_end(event, told, cut):
    rig = Rig()
    answer, reply = rig.playing()
    answer.task = asyncio.create_task(asyncio.sleep(10))
    rig.told()
    rig.floor.transition(event)
    assert rig.floor.state is FloorState.LISTENING and rig.told() == told
    assert rig.cut == ([reply] if cut else [])
    await asyncio.gather(answer.task, return_exceptions=True)
    assert answer.task.cancelled() and answer.ended == ("cancelled", told[-2][2])


def test_a_cancel_reason_is_the_answers_own_never_the_next_ones():
    rig = Rig()
    rig.playing()
    rig.floor.transition(Yield(CLIENT_CANCELLED))
    rig.playing()
    rig.told()
    rig.floor.transition(Yield())  # a typed turn interrupts the next answer
    assert ("ended", "cancelled", TURN_DETECTED) in rig.told()


def test_an_answer_withdrawn_before_the_new_turn_is_told_ends_after_it():
    rig = Rig()
    rig.playing(started_audio=False)
    rig.told()
    rig.floor.transition(Withdraw(report=False))
    assert rig.told() == [("state", "listening")]  # nothing heard: no clear, and its end waits
    rig.floor.transition(Announced())
    assert rig.told() == [("ended", "cancelled", TURN_DETECTED)]
    rig.floor.transition(Announced())
    assert rig.told() == []


def test_an_answer_dropped_before_it_played_tells_only_the_state():
    rig = Rig()
    answer = Answer(0, 1)
    rig.floor.transition(Prepare(answer))
    rig.floor.transition(Pause(answer, Hold.TURN, "no reply yet"))
    assert rig.floor.state is FloorState.PREPARING
    rig.floor.transition(Drop(answer))
    assert rig.told() == [("state", "thinking"), ("state", "listening")]


def test_nothing_to_cancel_changes_nothing():
    rig = Rig()
    for event in (Yield(), Withdraw(), Close(), Announced(), Resume(None, USER_HOLDS, "none")):
        rig.floor.transition(event)
    assert rig.told() == [] and rig.cut == []


def test_a_reply_that_plays_takes_its_answer_number_in_order():
    rig = Rig()
    first, _ = rig.playing()
    rig.floor.transition(Finish(first, failed=True))
    second, _ = rig.playing()
    assert (first.number, second.number) == (1, 2)
    assert first.ended == ("failed", None)
