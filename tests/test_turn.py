import pytest

from voice_agent.config import Settings
from voice_agent.turn_taking.turn import (
    Completeness,
    TurnDetector,
    TurnSignals,
    classify,
    fused_completeness,
    told_in_full,
)
from voice_agent.turn_taking.turn_detection import turn_detector


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
        ("Is there anything else I can help you with?", Completeness.COMPLETE),
        ("Hello. Where are you from?", Completeness.COMPLETE),
        ("Can I get a table for?", Completeness.INCOMPLETE),  # nothing earlier the "for" could be about
        ("What do you need it for? Can I get a table for?", Completeness.INCOMPLETE),
        ("Let me see.", Completeness.INCOMPLETE),  # the user asks for time to think
        ("The thing is.", Completeness.INCOMPLETE),  # it announces what comes next
        ("Okay. So the problem is.", Completeness.INCOMPLETE),
        ("What I mean is.", Completeness.INCOMPLETE),
        ("That's what the problem is.", Completeness.COMPLETE),
        ("No, wait.", Completeness.INCOMPLETE),  # about to correct themselves
        ("I can wait.", Completeness.COMPLETE),
        ("Hmm, lets see...", Completeness.INCOMPLETE),
        ("Hold on!", Completeness.INCOMPLETE),
        ("Give me just one second here.", Completeness.INCOMPLETE),  # asks for time, with where it is said
        ("Bear with me, please.", Completeness.INCOMPLETE),
        ("I'll see.", Completeness.COMPLETE),
        ("Okay, um, we, um, you know.", Completeness.INCOMPLETE),  # a filler phrase, like "um"
        ("It's the, I mean.", Completeness.INCOMPLETE),
        ("This one was a 2018.", Completeness.INCOMPLETE),  # a number before its noun
        ("I need the 2.", Completeness.INCOMPLETE),
        ("It's from 2018.", Completeness.UNKNOWN),  # a number alone is a draw
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


def signals(text, logprob=None, answer=None, audio=None):
    return TurnSignals(text, end_of_turn_logprob=logprob, answer=answer, audio_end_probability=audio)


@pytest.mark.parametrize(
    "given, expected",
    [
        # Without other signals, the rules decide.
        (signals("I'd like two tickets."), Completeness.COMPLETE),
        # A broken-off sentence by the LLM's reckoning waits, whatever the punctuation says.
        (signals("I have been using a demo", logprob=-21.4), Completeness.INCOMPLETE),
        (signals("my flight lands.", logprob=-16.1), Completeness.UNKNOWN),
        # A short reply the LLM doubts ("That sounds good." and then more) waits the middle silence.
        (signals("That sounds good.", logprob=-3.1), Completeness.UNKNOWN),
        (signals("That sounds good.", logprob=-0.8), Completeness.COMPLETE),
        # No punctuation hint, but the LLM is sure: "We will arrive at around 730."
        (signals("We will arrive at around 730.", logprob=-1.0), Completeness.COMPLETE),
        (signals("I live at 42.", logprob=-2.0), Completeness.UNKNOWN),
        # A level voice at a complete-looking sentence: Smart Turn hears it going on.
        (signals("So this is the second pass.", logprob=-1.9, audio=0.19), Completeness.UNKNOWN),
        (signals("So this is the second pass.", logprob=-1.9, audio=0.8), Completeness.COMPLETE),
        # The dialogue state knows what was asked, and overrides the rules both ways.
        (signals("It's 555.", logprob=-2.1, answer=Completeness.INCOMPLETE), Completeness.INCOMPLETE),
        (signals("Okay.", logprob=-2.8, answer=Completeness.COMPLETE), Completeness.COMPLETE),
        (signals(None, logprob=-0.1), Completeness.INCOMPLETE),  # the words are not transcribed yet
    ],
)
def test_fused_completeness(given, expected):
    assert fused_completeness(given) is expected


def test_the_turn_ends_sooner_only_when_the_signals_agree():
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200)
    question = "What time do you close on Sundays?"
    assert detector.required_silence_ms(signals(question, logprob=-0.07)) == 200
    assert detector.required_silence_ms(signals(question, logprob=-0.07, audio=0.9)) == 200
    assert detector.required_silence_ms(signals(question, logprob=-0.07, audio=0.1)) == 600  # the voice says more
    assert detector.required_silence_ms(signals(question, logprob=-2.5)) == 350  # the LLM is not sure
    # A greeting before the question costs the end token some probability; the "?" says the rest.
    assert detector.required_silence_ms(signals("Hello, are you open tonight?", logprob=-1.44)) == 200
    assert detector.required_silence_ms(signals("Can I bring my dog.", logprob=-1.44)) == 350  # said flat: -1.2
    assert detector.required_silence_ms(signals(question)) == 350  # the transcript alone is one signal
    assert detector.required_silence_ms(question) == 350
    request = "I'd like a table for four people."
    assert detector.required_silence_ms(signals(request, logprob=-0.3)) == 200  # a request waits for the agent
    assert detector.required_silence_ms(signals(request, logprob=-2.0)) == 350
    assert detector.required_silence_ms(signals("Thank you, goodbye.", logprob=-0.8)) == 200
    assert detector.required_silence_ms(signals("Can I bring my dog.", logprob=-0.2)) == 200  # a question said flat
    assert (
        detector.required_silence_ms(signals("Hello there.", logprob=-0.5)) == 350
    )  # the reason for the call may follow
    assert detector.required_silence_ms(signals("Yes.", logprob=-0.8, answer=Completeness.COMPLETE)) == 200
    assert detector.required_silence_ms(signals("I want to go to", logprob=-24.0)) == 2000
    assert detector.is_turn_over(210, signals(question, logprob=-0.07))
    assert not detector.is_turn_over(210, signals(question, logprob=-2.5))


def test_the_confident_silence_is_never_longer_than_the_complete_one():
    detector = TurnDetector(complete_ms=150, confident_ms=200)
    assert detector.required_silence_ms(signals("Are you open?", logprob=-0.1)) == 150


def test_a_finished_telling_waits_longer_than_a_question_a_request_or_a_goodbye():
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=1800)
    # The meeting's opening before a 2 s thinking pause: the LLM reads it as -3.7.
    assert detector.required_silence_ms(signals("Okay, well I think we're ready to begin.", logprob=-3.7)) == 1800
    assert detector.required_silence_ms(signals("That sounds good.", logprob=-3.1)) == 1800  # doubt never shortens
    assert detector.required_silence_ms(signals("That sounds good.")) == 1800  # no LLM reading: no verdict
    assert detector.required_silence_ms(signals("I'd like a table for four people.", logprob=-2.0)) == 350
    assert detector.required_silence_ms(signals("Thank you. Goodbye.", logprob=-1.5)) == 350
    assert detector.required_silence_ms(signals("Are you open tonight?")) == 350  # a question, the rules alone
    assert detector.required_silence_ms(signals("Are you open tonight?", logprob=-0.2)) == 200
    # "730." is a draw for the rules, not a finished telling: the no-hint silence.
    assert detector.required_silence_ms(signals("We will arrive at around 730.", logprob=-1.9)) == 600
    # The answer to what the agent asked is not a telling that may go on.
    assert detector.required_silence_ms(signals("Yes.", answer=Completeness.COMPLETE)) == 200
    assert detector.required_silence_ms(TurnSignals("Four of us.", agent_asked=True)) == 350
    # Never sooner than a complete sentence's silence.
    assert TurnDetector(complete_ms=700, telling_ms=550).required_silence_ms("I'm here.") == 700


@pytest.mark.parametrize(
    "text, silence",
    [
        ("I live at 42.", 2000),  # an address begun
        ("10.", 2000),
        ("and so my fellow Americans ask not what your country can do for you", 2000),  # no full stop: still a telling
        ("We will arrive at around 730.", 350),  # a time of day is whole
        ("We will arrive at round 730.", 350),  # Whisper's "around", at times
        ("We arrive at 7:30.", 350),
        ("We arrive by 1930.", 350),
        ("This one was a 2018.", 2000),  # a year: the clause goes on
        ("Please book it for 7.", 200),  # a request, not a telling: the LLM agrees it is over
    ],
)
def test_a_telling_waits_unless_it_ends_in_a_time_of_day(text, silence):
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000)
    assert detector.required_silence_ms(signals(text, logprob=-0.5)) == silence


def test_a_user_who_paused_longer_than_the_telling_silence_gets_more():
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000)
    detector.habit.went_on_after(1920)
    assert detector.required_silence_ms(signals("And it's great joy.", logprob=-2.9)) == 2220
    # A statement complete by every signal is not held for the habit: it hands the turn over.
    assert detector.required_silence_ms(signals("It's not mine.", logprob=-0.7)) == 350
    # Nor is a goodbye, whoever says it.
    assert detector.required_silence_ms(signals("I don't think so, and that's it.", logprob=-0.7)) == 200
    # Their questions are not tellings, but a finished sentence has not ended their turn before: no quick commit.
    assert detector.required_silence_ms(signals("Are you open?", logprob=-0.1)) == 600


@pytest.mark.parametrize(
    "pause_ms, into_answer, silence",
    [
        (None, False, 200),  # never paused: the quick commit
        (400, False, 200),  # the rhythm between sentences ("Sorry. Make that five people.")
        (600, False, 600),  # thought as long as the silence that gives no hint
        (900, True, 200),  # talked into the answer: as often a correction as more of the turn
    ],
)
def test_a_question_waits_the_no_hint_silence_for_a_user_who_thinks_within_turns(pause_ms, into_answer, silence):
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000)
    if pause_ms is not None:
        detector.habit.went_on_after(pause_ms, into_answer=into_answer)
    assert detector.required_silence_ms(signals("Are you open?", logprob=-0.1)) == silence
    assert detector.required_silence_ms(signals("Yes.", answer=Completeness.COMPLETE)) == 200  # answers the agent


@pytest.mark.parametrize(
    "text, logprob, told",
    [
        # Finished: Whisper's full stop, nothing left open, an LLM that calls it over.
        ("I don't think so, and that's it.", -0.8, True),
        ("My voice is my passport. Verify me.", -1.1, True),
        ("Sure, that works.", -1.9, True),
        ("It's not mine.", -2.0, True),
        ("I'm done!", -0.5, True),
        # Left open by the words.
        ("Okay, um, we, um, you know.", -0.5, False),  # a filler phrase
        ("Okay, um, we, um, you know...", -0.5, False),
        ("I'd like to go, um.", -0.5, False),  # a filler
        ("I want the fish and.", -0.5, False),  # a conjunction
        ("This one was a.", -0.5, False),  # an article
        ("This one was a 2018.", -0.5, False),  # a number
        ("This one was.", -0.5, False),  # an auxiliary
        ("Give me just one second here and I'm.", -0.5, False),  # a subject and its auxiliary
        ("So then we.", -0.5, False),  # a subject pronoun
        ("And then they.", -0.5, False),
        ("We arrive on.", -0.5, False),  # a preposition before Whisper's full stop
        ("I was going to the sto-", -0.5, False),  # a word cut off
        ("That sounds good", -0.5, False),  # no final punctuation
        ("Let me see.", -0.5, False),  # asks for time
        # Left open by the LLM.
        ("That sounds good.", -2.1, False),
        ("And so my fellow Americans.", -3.0, False),
        ("That sounds good.", None, False),  # no reading: no verdict
        (None, -0.5, False),  # the words are not in yet
    ],
)
def test_a_statement_is_told_in_full_only_when_every_signal_closes_it(text, logprob, told):
    assert told_in_full(TurnSignals(text, end_of_turn_logprob=logprob)) is told


@pytest.mark.parametrize(
    "text, logprob, silence",
    [
        ("It's not mine.", -0.8, 350),  # told in full: the complete silence, as a question
        ("Sure, that works.", -1.9, 350),
        ("Sure, that works.", -3.0, 2000),  # the LLM expects more: the telling silence
        ("This one was a.", -0.5, 2000),  # inside a clause: the unfinished silence
        ("Give me just one second here and I'm.", -0.5, 2000),
        ("Okay, um, we, um, you know.", -0.5, 2000),
    ],
)
def test_a_statement_told_in_full_hands_the_turn_over_and_an_open_one_waits(text, logprob, silence):
    detector = TurnDetector(complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000)
    detector.habit.went_on_after(2500)  # a user who thought long before: their open sentences wait longer still
    held = detector.required_silence_ms(signals(text, logprob=logprob))
    assert held == silence if silence < 2000 else held >= silence


def test_a_told_statement_waits_its_own_silence_which_the_habit_does_not_lengthen():
    detector = TurnDetector(
        complete_ms=350, default_ms=600, incomplete_ms=2000, confident_ms=200, telling_ms=2000, told_ms=900
    )
    detector.habit.went_on_after(2500)
    assert detector.required_silence_ms(signals("It's not mine.", logprob=-1.0)) == 900
    assert detector.required_silence_ms(signals("It's not mine.", logprob=-3.0)) == 2800  # left open: the habit
    # Never longer than a telling left open, never shorter than a complete sentence.
    assert TurnDetector(complete_ms=350, telling_ms=1000, told_ms=5000).told_ms == 1000
    assert TurnDetector(complete_ms=350, telling_ms=1000, told_ms=100).told_ms == 350


def test_words_whose_signals_are_still_out_wait_like_words_not_in_yet():
    detector = TurnDetector()
    question = TurnSignals("Can we sit outside?", pending=True)
    assert detector.required_silence_ms(question) == detector.required_silence_ms(None) == 2000
    assert detector.required_silence_ms(TurnSignals("Can we sit outside?", end_of_turn_logprob=-0.3)) == 200
    # The answer to what the agent asked decides alone: nothing to wait for.
    answer = TurnSignals("Yes.", answer=Completeness.COMPLETE, pending=True)
    assert detector.required_silence_ms(answer) == 200


def test_words_not_in_yet_wait_as_long_as_a_telling_from_a_user_who_thinks_long():
    detector = TurnDetector()
    detector.habit.went_on_after(2500)
    telling = detector.required_silence_ms(TurnSignals("I have been using a demo.", end_of_turn_logprob=-3.0))
    assert telling == 2800  # the longest pause seen, and a margin
    assert detector.required_silence_ms(None) == telling
    assert detector.required_silence_ms(TurnSignals("Can we sit outside?", pending=True)) == telling


@pytest.mark.parametrize(
    "text, logprob, silence",
    [
        # A question waits no telling silence, whatever Whisper's punctuation.
        ("Is that anything else I can help you with?", -0.6, 200),
        ("Is that anything else I can help you with.", -0.6, 200),  # flat, a preposition it may end in
        ("Is that anything else I can help you with", -0.6, 200),
        ("computer what is the weather forecast at the beach", -0.1, 200),  # said to the agent, no punctuation
        ("computer what is the weather forecast at the beach", -3.0, 600),  # the LLM doubts: no hint, no telling
        # A preposition the question has not reached the end of, which the LLM calls broken off: unfinished.
        ("Can I get a table for.", -9.0, 2000),
        ("Can I get a table for.", -3.0, 2000),
        # A request, with Whisper's full stop or without.
        ("My voice is my passport. Verify me.", -1.3, 350),
        ("My voice is my passport. Verify me.", -0.5, 200),
        ("verify me", -0.5, 200),
        # A goodbye: the LLM's doubt makes it no hint, not a telling.
        ("I don't think so, and that's it.", -3.1, 600),
        ("I don't think so, and that's it.", -0.8, 200),
        # A clause left open by a number that is no time of day: the telling silence.
        ("This one was a 2018.", -0.5, 2000),
    ],
)
def test_the_embedded_defaults_hold_no_whole_question_request_or_goodbye_for_the_telling_silence(
    text, logprob, silence
):
    detector = turn_detector(Settings())
    assert detector.required_silence_ms(signals(text, logprob=logprob)) == silence


def test_the_decision_explains_what_held_the_turn():
    why = turn_detector(Settings()).explain(signals("This one was a 2018.", logprob=-0.5))
    assert why.startswith("2000 ms: incomplete telling, told in full False, logprob -0.5")


@pytest.mark.parametrize(
    "text, silence",
    [
        ("It's a Tesla.", 350),  # the answer to the agent's question hands the turn back
        ("Okay, um, we, um, you know.", 2000),  # but a clause left open waits however it was asked for
        ("This one was a 2018.", 2000),
        ("Give me just one second here and I'm.", 2000),
        ("Give me just one second here.", 2000),
    ],
)
def test_an_answer_to_the_agent_hands_the_turn_back_unless_its_clause_is_open(text, silence):
    detector = turn_detector(Settings())
    assert detector.required_silence_ms(TurnSignals(text, end_of_turn_logprob=-1.5, agent_asked=True)) == silence
