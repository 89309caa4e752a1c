import pytest

from voice_agent.turn_taking.speech_act import SpeechAct, hands_over, speech_act


@pytest.mark.parametrize(
    "text, act",
    [
        # Questions, with Whisper's "?" or said flat with a full stop.
        ("Are you open tonight?", SpeechAct.QUESTION),
        ("Tell me about your menu. What do you recommend for dinner?", SpeechAct.QUESTION),
        ("Can I bring my dog.", SpeechAct.QUESTION),
        ("So what time is it.", SpeechAct.QUESTION),
        ("How much is it.", SpeechAct.QUESTION),
        # Requests: wanting, asking, telling the agent what to do.
        ("I'd like a table for four people.", SpeechAct.REQUEST),
        ("We would love a window seat.", SpeechAct.REQUEST),
        ("I need a taxi.", SpeechAct.REQUEST),
        ("Sorry. Make that five people, not four.", SpeechAct.REQUEST),
        ("Please book it for seven.", SpeechAct.REQUEST),
        ("Okay, tell me the specials.", SpeechAct.REQUEST),
        ("I'll have the pasta.", SpeechAct.REQUEST),
        ("Play some jazz.", SpeechAct.REQUEST),
        ("Let's do seven.", SpeechAct.REQUEST),
        ("My voice is my passport. Verify me.", SpeechAct.REQUEST),  # a verb with "me" after it asks the agent
        ("verify me", SpeechAct.REQUEST),
        ("Fix it", SpeechAct.REQUEST),
        ("Not me.", SpeechAct.TELLING),
        ("Told me to come back.", SpeechAct.TELLING),
        # Said to the agent by name, with Whisper's punctuation or without.
        ("computer what is the weather forecast at the beach", SpeechAct.QUESTION),
        ("Computer, what is the weather forecast at the beach?", SpeechAct.QUESTION),
        ("Anna, can you call me back", SpeechAct.QUESTION),
        ("computer play some jazz", SpeechAct.REQUEST),
        ("That's what is wrong.", SpeechAct.TELLING),
        ("Bob, I went home.", SpeechAct.TELLING),
        # Closings.
        ("Thank you. Goodbye.", SpeechAct.CLOSING),
        ("No thanks.", SpeechAct.CLOSING),
        ("That's all.", SpeechAct.CLOSING),
        ("I don't think so, and that's it.", SpeechAct.CLOSING),
        ("No, I think that's it for today.", SpeechAct.CLOSING),
        ("Yeah, yeah, that's it.", SpeechAct.TELLING),  # agrees, and may go on
        ("Hello.", SpeechAct.GREETING),
        ("Hi there!", SpeechAct.GREETING),
        ("Good morning.", SpeechAct.GREETING),
        ("Hello, I have a problem with my order.", SpeechAct.TELLING),
        # Tellings: what real speakers go on after.
        ("Okay, well I think we're ready to begin.", SpeechAct.TELLING),
        ("And it's great joy.", SpeechAct.TELLING),
        ("So this is the second pass.", SpeechAct.TELLING),
        ("Yes.", SpeechAct.TELLING),
        ("That sounds good.", SpeechAct.TELLING),
        ("What I mean is this.", SpeechAct.TELLING),
        ("Let me see.", SpeechAct.TELLING),
        ("", SpeechAct.TELLING),
        ("...", SpeechAct.TELLING),
        (None, SpeechAct.TELLING),
    ],
)
def test_speech_act(text, act):
    assert speech_act(text) is act


def test_a_hesitation_does_not_end_the_sentence():
    assert speech_act("I'd like a table for... for people.") is SpeechAct.REQUEST
    assert speech_act("Can I bring my… dog?") is SpeechAct.QUESTION


def test_the_last_sentence_decides():
    assert speech_act("Can I come at seven? We will be four.") is SpeechAct.TELLING
    assert speech_act("We will be four. Can I come at seven?") is SpeechAct.QUESTION


def test_only_a_telling_keeps_the_turn():
    assert [hands_over(a) for a in SpeechAct] == [True, True, True, True, False]
