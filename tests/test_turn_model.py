"""The fitted end-of-turn model and the decision made from it: pure."""

import math

import pytest

from voice_agent.turn_taking.pause_habit import PauseHabit
from voice_agent.turn_taking.turn import Completeness, TurnDetector, TurnSignals, classify
from voice_agent.turn_taking.turn_model import FEATURES, TurnModel, default_model, features


def detector(cost: float = 4.0, habit: PauseHabit | None = None) -> TurnDetector:
    return TurnDetector(incomplete_ms=2000, confident_ms=200, habit=habit, cut_in_cost=cost, model=default_model())


def test_the_packaged_coefficients_load_and_match_the_features():
    model = default_model()
    assert len(model.weights) == len(FEATURES) == len(features(TurnSignals("Hello."), 300))


def test_the_probability_rises_with_the_silence():
    model = default_model()
    signals = TurnSignals("I'd like a table for two.", end_of_turn_logprob=-1.5)
    chances = [model.probability(signals, ms) for ms in (100, 300, 800, 2000)]
    assert chances == sorted(chances) and chances[0] < chances[-1]


def test_silence_for_is_where_the_probability_reaches_the_level():
    model = default_model()
    signals = TurnSignals("My voice is my passport. Verify me.", end_of_turn_logprob=-1.0)
    silence = model.silence_for(signals, 0.8)
    assert math.isfinite(silence)
    assert model.probability(signals, silence) == pytest.approx(0.8, abs=1e-6)


def test_a_finished_statement_ends_sooner_than_a_clause_broken_off():
    decide = detector()
    statement = decide.required_silence_ms(TurnSignals("I don't think so, and that's it.", end_of_turn_logprob=-1.5))
    broken = decide.required_silence_ms(TurnSignals("this one was a", end_of_turn_logprob=-15.0))
    assert statement < 1000 and broken == 2000


def test_a_statement_ending_in_a_number_is_read_from_its_full_stop_and_number():
    model = default_model()
    # No LLM reading yet: Whisper's full stop after a number says more than no hint.
    time = TurnSignals("We will arrive at around 730.")
    hint = TurnSignals("We will arrive at around")
    assert features(time, 300)[FEATURES.index("ends_in_number")] == 1.0
    assert features(time, 300)[FEATURES.index("final_punctuation")] == 1.0
    assert model.probability(time, 500) > model.probability(TurnSignals("we will arrive at around"), 500)
    assert model.probability(time, 500) > model.probability(hint, 500)
    assert detector(3.0).required_silence_ms(time) < 1000


def test_a_question_ending_in_a_preposition_is_finished():
    assert classify("Where are you from?") is Completeness.COMPLETE
    assert classify("I'm calling from") is Completeness.INCOMPLETE
    signals = TurnSignals("Is there anything else I can help you with?", end_of_turn_logprob=-0.5)
    assert detector().required_silence_ms(signals) < 1000


def test_no_words_yet_waits_the_longest_and_a_higher_cut_in_cost_waits_longer():
    assert detector().required_silence_ms(None) == 2000
    signals = TurnSignals("Okay.", end_of_turn_logprob=-2.8)
    assert detector(2.0).required_silence_ms(signals) <= detector(8.0).required_silence_ms(signals)
    assert detector(0.0).required_silence_ms(signals) == 200  # bounded: never inside a gap between words


def test_a_user_who_thinks_long_after_tellings_gets_that_long():
    habit = PauseHabit()
    habit.went_on_after(1200)
    signals = TurnSignals("We went there last year.", end_of_turn_logprob=-2.6)
    assert detector(habit=habit).required_silence_ms(signals) >= 1500
    # One that every signal calls finished hands the turn over whatever the habit.
    told = TurnSignals("We went there last year.", end_of_turn_logprob=-1.0)
    assert detector(habit=habit).required_silence_ms(told) < 1500


def test_a_model_file_with_other_features_is_refused(tmp_path):
    path = tmp_path / "model.json"
    path.write_text('{"features": ["bias"], "weights": [0.0]}')
    with pytest.raises(ValueError, match="features"):
        TurnModel.load(path)
