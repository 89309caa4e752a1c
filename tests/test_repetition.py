"""The loop guard and the repetition measures of the answers eval."""

from __future__ import annotations

import pytest

from voice_agent.reply.repetition import LoopGuard, longest_word_run, repeated_trigram_share, spoken_words


def guard_stops_at(text: str, step: int = 2) -> str | None:
    """The text streamed up to the delta at which the guard found a loop, or None."""
    guard = LoopGuard()
    for end in range(step, len(text) + step, step):
        if guard.push(text[end - step : end]):
            return text[:end]
    return None


@pytest.mark.parametrize(
    "text, stopped_after",
    [
        ("You can get to double double double double double", "You can get to double double double "),
        ("I'm not. I'm not. I'm not. I'm not.", "I'm not. I'm not. I'm not."),
        ("A computer is a computer, and a computer is a computer.", "A computer is a computer, and a computer is a "),
        ("Ha, ha, HA! That's funny.", "Ha, ha, HA!"),
    ],
)
def test_the_guard_stops_a_loop_once_its_last_word_is_complete(text, stopped_after):
    stopped = guard_stops_at(text, step=1)
    assert stopped is not None and stopped.rstrip() == stopped_after.rstrip()


@pytest.mark.parametrize(
    "text",
    [
        "No, no, that's fine. We open at nine on weekdays and at ten, we open at noon on Sundays.",
        "Sure! The capital of France is Paris, a city of about two million people.",
        "It is very very good.",
    ],
)
def test_the_guard_lets_ordinary_answers_through(text):
    assert guard_stops_at(text) is None
    assert guard_stops_at(text + " ", step=len(text) + 1) is None


def test_word_runs_and_repeated_trigrams():
    assert longest_word_run(spoken_words("double Double double, trouble double")) == 3
    assert longest_word_run([]) == 0
    assert repeated_trigram_share(spoken_words("a b c a b c")) == pytest.approx(1 / 4)
    assert repeated_trigram_share(spoken_words("one two")) == 0.0
    assert repeated_trigram_share(spoken_words("I'm not. " * 10)) > 0.8
