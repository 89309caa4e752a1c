"""The answer handle: its holders, its end and the reason that travels with it, and the grace."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from voice_agent.turn_taking.answer import USER_HOLDS, Answer, Hold


class Playing:
    """A reply as the answer sees it: started or not, when its first audio went out, and whether it flows."""

    def __init__(self, first_audio_at: float | None = None):
        self.started_audio = first_audio_at is not None
        self.timings = SimpleNamespace(first_audio_at=first_audio_at)
        self.flowing = True

    def set_flowing(self, flowing: bool) -> None:
        self.flowing = flowing


def test_the_voice_flows_only_once_every_holder_let_go():
    reply = Playing(1.0)
    answer = Answer(0, 1, reply)  # type: ignore[arg-type]
    assert reply.flowing and not answer.paused
    assert answer.pause(Hold.ONSET, "test") is True
    assert answer.pause(Hold.TURN, "test") is False  # paused already
    assert answer.resume(Hold.ONSET, "test") is False  # the turn still holds it
    assert not reply.flowing and answer.paused
    assert answer.resume(Hold.TURN, "test") is True
    assert reply.flowing and not answer.paused


def test_a_holder_released_twice_or_never_held_changes_nothing():
    answer = Answer(0, 1, Playing(1.0))  # type: ignore[arg-type]
    assert answer.resume(Hold.TURN, "test") is False
    answer.pause(Hold.ONSET, "test")
    assert answer.resume(Hold.TURN, "test") is False and answer.paused
    assert answer.resume(Hold.ONSET, "test") is True
    assert answer.resume(Hold.ONSET, "test") is False


def test_a_hand_over_lets_no_frame_out_and_moves_only_what_is_held():
    reply = Playing(1.0)
    answer = Answer(0, 1, reply)  # type: ignore[arg-type]
    answer.hand_over(Hold.ONSET, Hold.TURN)
    assert not answer.paused  # nothing held: nothing to take over
    answer.pause(Hold.ONSET, "test")
    answer.hand_over(Hold.ONSET, Hold.TURN)
    assert answer.held_by(Hold.TURN) and not answer.held_by(Hold.ONSET)
    assert answer.resume(Hold.ONSET, "test") is False and not reply.flowing
    assert answer.resume(USER_HOLDS, "test") is True and reply.flowing


def test_a_reply_attached_while_held_stays_silent():
    answer = Answer(0, 1)
    answer.pause(Hold.TURN, "test")
    reply = Playing()
    answer.attach(reply)  # type: ignore[arg-type]
    assert not reply.flowing
    answer.resume(Hold.TURN, "test")
    assert reply.flowing


async def test_a_cancel_stops_its_task_and_its_end_carries_the_reason():
    answer = Answer(0, 1)
    answer.task = asyncio.create_task(asyncio.sleep(10))
    waiting = asyncio.create_task(answer.done())
    await asyncio.sleep(0)
    answer.cancel("client_cancelled")
    assert await waiting == ("cancelled", "client_cancelled")
    await asyncio.gather(answer.task, return_exceptions=True)
    assert answer.task.cancelled()
    answer.finish(failed=False)  # ended already: its end stays
    assert await answer.done() == ("cancelled", "client_cancelled")


async def test_an_answer_that_played_to_its_end_has_no_cancel_reason():
    answer = Answer(None)
    answer.finish(failed=True)
    assert await answer.done() == ("failed", None)


def test_the_user_heard_nothing_until_the_first_audio():
    answer = Answer(turn_start=0)
    assert answer.heard_nothing and answer.voiced_at is None
    answer.reply = Playing(None)  # type: ignore[assignment]
    assert answer.heard_nothing
    answer.reply = Playing(10.0)  # type: ignore[assignment]
    assert not answer.heard_nothing and answer.voiced_at == 10.0


def test_the_grace_runs_from_the_first_audio_of_an_answer_to_speech():
    answer = Answer(turn_start=0)
    assert not answer.in_grace(10.0, 500)  # nothing voiced yet
    answer.reply = Playing(10.0)  # type: ignore[assignment]
    assert answer.in_grace(10.5, 500)
    assert not answer.in_grace(10.6, 500)
    fixed_words = Answer(turn_start=None, reply=Playing(10.0))  # type: ignore[arg-type]
    assert not fixed_words.in_grace(10.1, 500)  # a greeting or a text answer is never withdrawn
