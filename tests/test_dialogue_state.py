import pytest

from voice_agent.turn_taking.dialogue_state import Expectation, answer_completeness, asks_for_answer, expectation
from voice_agent.turn_taking.turn import Completeness


@pytest.mark.parametrize(
    "agent, expected",
    [
        ("Sure. What's your phone number?", Expectation.PHONE),
        ("Could I have a number to reach you on?", Expectation.PHONE),
        ("What date would you like to come in?", Expectation.DATE),
        ("When would you like to arrive?", Expectation.DATE),
        ("And your email address?", Expectation.EMAIL),
        ("Could you spell your last name for me?", Expectation.SPELLING),
        ("Please spell your name.", Expectation.SPELLING),
        ("Would you like a dessert?", Expectation.YES_NO),
        ("Great. Is that all?", Expectation.YES_NO),
        ("Do you want the pasta or the fish?", Expectation.OPEN),  # a choice, not a yes/no
        ("What would you like to drink?", Expectation.OPEN),
        ("We are open until ten tonight.", Expectation.OPEN),
        ("You can bring your dog, but I'm not sure about the date.", Expectation.OPEN),  # tells, asks nothing
        ("Tell me your phone number.", Expectation.PHONE),
        ("Spell your last name for me.", Expectation.SPELLING),
        (
            "Would you like a table? We have one at eight. What name is it under?",
            Expectation.OPEN,
        ),  # the last one counts
        ("", Expectation.OPEN),
        (None, Expectation.OPEN),
    ],
)
def test_what_the_agent_asked_for(agent, expected):
    assert expectation(agent) is expected


@pytest.mark.parametrize(
    "expected, user, completeness",
    [
        (Expectation.YES_NO, "Yes.", Completeness.COMPLETE),
        (Expectation.YES_NO, "No thanks.", Completeness.COMPLETE),
        (Expectation.YES_NO, "Yeah, sure.", Completeness.COMPLETE),
        (Expectation.YES_NO, "Yes. And could you add a dessert?", None),  # more than an answer: the rules decide
        (Expectation.YES_NO, "I'm not sure, what do you have", None),
        (Expectation.PHONE, "It's 555.", Completeness.INCOMPLETE),
        (Expectation.PHONE, "five five five", Completeness.INCOMPLETE),
        (Expectation.PHONE, "It's 555, 0192.", Completeness.COMPLETE),
        (Expectation.PHONE, "five five five oh one nine two", Completeness.COMPLETE),
        (Expectation.PHONE, "I'd rather not say.", None),
        (Expectation.DATE, "March.", Completeness.INCOMPLETE),
        (Expectation.DATE, "On the 5th of", Completeness.INCOMPLETE),
        (Expectation.DATE, "March 5th.", Completeness.COMPLETE),
        (Expectation.DATE, "Next Friday.", Completeness.COMPLETE),
        (Expectation.DATE, "Tomorrow evening.", Completeness.COMPLETE),
        (Expectation.EMAIL, "It's john.", Completeness.INCOMPLETE),
        (Expectation.EMAIL, "john at example", Completeness.INCOMPLETE),
        (Expectation.EMAIL, "john at example dot com", Completeness.COMPLETE),
        (Expectation.EMAIL, "john@example.com", Completeness.COMPLETE),
        (Expectation.SPELLING, "S, M, I", Completeness.INCOMPLETE),
        (Expectation.SPELLING, "S-M-I-T-H.", Completeness.INCOMPLETE),  # another letter may follow
        (Expectation.SPELLING, "S-M-I-T-H, that's it.", Completeness.COMPLETE),
        (Expectation.OPEN, "Yes.", None),
        (Expectation.DATE, "Do you have anything on Friday?", None),  # asked back: a whole question
        (Expectation.PHONE, "Do you need the area code?", None),
        (Expectation.PHONE, None, None),
        (Expectation.PHONE, ".", None),
    ],
)
def test_whether_the_words_answer_it(expected, user, completeness):
    assert answer_completeness(expected, user) is completeness


@pytest.mark.parametrize(
    "agent, asks",
    [
        ("How many people?", True),
        ("We open at five. Would you like to book a table?", True),
        ("What's your name?", True),
        ("How can I help you today?", False),
        ("Sure. Anything else?", False),
        ("Is there anything else I can do for you?", False),
        ("We open at five.", False),
        ("What would you like? We have pasta.", False),  # the last sentence is not a question
        ("", False),
        (None, False),
    ],
)
def test_asks_for_answer(agent, asks):
    assert asks_for_answer(agent) is asks


def test_a_question_after_an_agent_statement_that_names_a_date_is_answered_at_once():
    from voice_agent.turn_taking.turn import TurnDetector, TurnSignals

    agent = "You can bring your dog, but I'm not sure about the date."
    user = "Do you have any vegetarian dishes?"
    signals = TurnSignals(user, end_of_turn_logprob=-0.1, answer=answer_completeness(expectation(agent), user))
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000)
    assert detector.required_silence_ms(signals) == 200  # it waited 2 s as an unfinished date
