"""The conversations eval's measure: an answer whose first sentence repeats an earlier one's."""

from __future__ import annotations

from voice_agent.bench.conversations import copies_of, parse_kept


def test_a_first_sentence_said_before_is_a_copy():
    earlier = ["I'm sorry, I'm not a dog-friendly service. I'm here to help.", "The train takes ten minutes."]
    assert copies_of(earlier, "I'm sorry, I'm not a vegetarian-friendly service. Anything else?") == (True, False)
    assert copies_of(earlier, "The train takes ten minutes. It leaves at nine.") == (True, True)
    assert copies_of(earlier, "A taxi costs about twenty dollars.") == (False, False)
    assert copies_of([], "I'm not.") == (False, False)
    assert copies_of(earlier, "") == (False, False)


def test_the_values_to_compare():
    assert parse_kept("all,1, 0") == [None, 1, 0]
