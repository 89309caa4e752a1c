import pytest

from voice_agent.turn import Completeness, TurnDetector, classify


@pytest.mark.parametrize(
    "text, expected",
    [
        ("What is the capital of France?", Completeness.COMPLETE),
        ("I'm doing well.", Completeness.COMPLETE),
        ("That's what I like.", Completeness.COMPLETE),
        ("I'd like a table for", Completeness.INCOMPLETE),
        ("I'd like a table for.", Completeness.INCOMPLETE),  # Whisper adds a full stop anyway
        ("My number is 555", Completeness.INCOMPLETE),
        ("My number is 555.", Completeness.INCOMPLETE),  # the first group of a phone number
        ("Call me at 555, 01.", Completeness.INCOMPLETE),
        ("My number is 555, 0192.", Completeness.UNKNOWN),  # a whole local number
        ("Table number 4.", Completeness.UNKNOWN),
        ("I live at 42.", Completeness.UNKNOWN),  # as likely done: "We arrive at 730."
        ("I want to go to...", Completeness.INCOMPLETE),
        ("Um.", Completeness.INCOMPLETE),
        ("m", Completeness.INCOMPLETE),  # Whisper's spelling of a thinking "hmm"
        ("Hm.", Completeness.INCOMPLETE),
        ("and the", Completeness.INCOMPLETE),
        ("I would like", Completeness.INCOMPLETE),
        ("hello there", Completeness.UNKNOWN),
        ("We to arrive on.", Completeness.INCOMPLETE),  # a pause in "We arrive on ... Friday"
        ("A cheeseburger in.", Completeness.INCOMPLETE),  # "and" misheard before a pause
        ("What are you interested in?", Completeness.COMPLETE),
        ("Let me see.", Completeness.INCOMPLETE),  # the user asks for time to think
        ("Hmm, lets see...", Completeness.INCOMPLETE),
        ("Hold on!", Completeness.INCOMPLETE),
        ("I'll see.", Completeness.COMPLETE),
        ("", Completeness.UNKNOWN),
    ],
)
def test_classify(text, expected):
    assert classify(text) is expected


def test_silence_needed_depends_on_the_transcript():
    detector = TurnDetector(complete_ms=300, default_ms=600, incomplete_ms=1200)
    assert detector.is_turn_over(320, "Yes.")
    assert not detector.is_turn_over(320, "hello there")
    assert detector.is_turn_over(620, "hello there")
    assert not detector.is_turn_over(1000, "I want to go to")
    assert detector.is_turn_over(1250, "I want to go to")


def test_max_turn_length_ends_the_turn_without_silence():
    detector = TurnDetector(max_turn_s=5)
    assert detector.is_turn_over(0, "and", turn_ms=5000)


def test_no_transcript_yet_or_no_words():
    assert classify(None) is Completeness.INCOMPLETE  # the words are still being transcribed
    assert classify(".") is Completeness.UNKNOWN
    assert classify("...") is Completeness.UNKNOWN
