import pytest

from voice_agent.stt import looks_looped


@pytest.mark.parametrize(
    "text, looped",
    [
        ("Can I get a table for 6 6 6 6", True),
        ("My flight lands at 9 in the morning 9 in the morning 9 in the morning", True),
        ("yes yes yes yes yes yes", True),
        ("What is the capital of France?", False),
        ("No, no, I said no.", False),
        ("My number is 555-0192.", False),
    ],
)
def test_a_looping_decoder_is_recognized(text, looped):
    assert looks_looped(text) is looped
