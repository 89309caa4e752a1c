"""The answer under way, and the turn state derived from it."""

from __future__ import annotations

from types import SimpleNamespace

from voice_agent.answer import Answer, TurnState, state_of


def playing(first_audio_at: float | None) -> SimpleNamespace:
    """A reply as the answer sees it: started or not, and when its first audio went out."""
    return SimpleNamespace(
        started_audio=first_audio_at is not None, timings=SimpleNamespace(first_audio_at=first_audio_at)
    )


def test_the_state_follows_the_answer():
    assert state_of(None) is TurnState.LISTENING
    answer = Answer(turn_start=0, turn_id=1)
    assert state_of(answer) is TurnState.RESPONDING
    answer.reply = playing(None)
    assert state_of(answer) is TurnState.SPEAKING


def test_the_user_heard_nothing_until_the_first_audio():
    answer = Answer(turn_start=0)
    assert answer.heard_nothing and answer.voiced_at is None
    answer.reply = playing(None)
    assert answer.heard_nothing
    answer.reply = playing(10.0)
    assert not answer.heard_nothing and answer.voiced_at == 10.0


def test_the_grace_runs_from_the_first_audio_of_an_answer_to_speech():
    answer = Answer(turn_start=0)
    assert not answer.in_grace(10.0, 500)  # nothing voiced yet
    answer.reply = playing(10.0)
    assert answer.in_grace(10.5, 500)
    assert not answer.in_grace(10.6, 500)
    fixed_words = Answer(turn_start=None, reply=playing(10.0))
    assert not fixed_words.in_grace(10.1, 500)  # a greeting or a text answer is never withdrawn
