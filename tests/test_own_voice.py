"""Echo matching (voice_agent/echo.py): the agent's own words coming back are not the user."""

from voice_agent.echo import MAX_ECHO_DELAY_S, is_echo, timed_words

# An answer of three chunks, as the reply records them: text, start and end in its audio.
ANSWER = [
    ("We have a lot of different dishes,", 0.0, 2.0),
    ("from fresh pasta to grilled fish.", 2.2, 4.4),
    ("Would you like to hear about the desserts?", 4.6, 7.0),
]
SPOKEN = timed_words(ANSWER)


def test_words_are_spread_over_their_chunk():
    assert [w.word for w in SPOKEN[:3]] == ["we", "have", "a"]
    assert 0.0 < SPOKEN[0].at_s < SPOKEN[1].at_s < 2.0
    assert 2.2 < SPOKEN[7].at_s < 4.4  # "from"


def test_the_agents_own_words_played_at_that_moment_are_echo():
    assert is_echo("from fresh pasta", SPOKEN, 2.3, 3.2)
    assert is_echo("From Fresh Pastor to grilled.", SPOKEN, 2.3, 3.6)  # misheard, quieter copy
    # Echo arrives late: the words played up to the echo delay before the speech still count.
    assert is_echo("different dishes", SPOKEN, 2.2 + MAX_ECHO_DELAY_S / 2, 2.6)


def test_words_cut_short_at_the_end_of_the_audio_are_echo():
    spoken = timed_words([("No, I'm not sure about that.", 0.0, 2.0)])
    assert is_echo("No, I-", spoken, 0.2, 0.9)
    assert is_echo("No, n", spoken, 0.2, 0.9)  # the lone letter is left out


def test_the_user_is_not_echo():
    assert not is_echo("Wait, stop. I have a question.", SPOKEN, 2.3, 3.2)
    assert not is_echo("Sorry, can you repeat that?", SPOKEN, 4.8, 5.8)
    # The user's words over the echo: mostly not the agent's.
    assert not is_echo("pasta no wait stop I want the fish", SPOKEN, 2.3, 3.6)


def test_words_from_another_part_of_the_answer_are_not_echo():
    # "desserts" is said at about 6.5 s; speech at 0.5 s that says it is the user.
    assert not is_echo("the desserts", SPOKEN, 0.2, 0.8)


def test_no_words_is_not_echo():
    assert not is_echo("", SPOKEN, 2.3, 3.2)
    assert not is_echo("...", SPOKEN, 2.3, 3.2)
    assert not is_echo("we have", [], 0.0, 1.0)


def test_the_words_that_are_not_the_agents_are_what_is_left():
    from voice_agent.echo import others_words

    assert others_words("Yeah, grilled fish.", SPOKEN, 3.4, 4.4) == "yeah"
    assert others_words("Wait, what about dessert?", SPOKEN, 3.4, 4.4) == "wait what about dessert"
    assert others_words("Yeah, grilled fish.", SPOKEN, 0.0, 0.5) == "yeah grilled fish"  # said long after
