"""A client's turn detection mapped onto the session's settings: pure."""

import dataclasses

from voice_agent.config import Settings
from voice_agent.protocols.events import MANUAL, SEMANTIC_VAD, SERVER_VAD, TurnDetection
from voice_agent.turn_taking.turn_detection import turn_taking

BASE = Settings(
    end_silence_complete_ms=350,
    end_silence_ms=600,
    end_silence_incomplete_ms=2000,
    end_silence_telling_ms=1800,
    vad_threshold=0.5,
)


def silences(settings: Settings) -> tuple[int, int, int, int]:
    s = settings
    return s.end_silence_complete_ms, s.end_silence_ms, s.end_silence_incomplete_ms, s.end_silence_telling_ms


def test_the_default_is_the_servers_own_turn_taking_with_every_field_reported():
    taking = turn_taking(BASE, TurnDetection())
    assert taking.settings == BASE and not taking.manual
    assert taking.in_effect == TurnDetection(SERVER_VAD, silence_ms=600, prefix_padding_ms=300, threshold=0.5)


def test_server_vad_silence_bounds_the_transcript_aware_silences():
    assert silences(turn_taking(BASE, TurnDetection(silence_ms=500)).settings) == (350, 500, 2000, 500)
    assert silences(turn_taking(BASE, TurnDetection(silence_ms=200)).settings) == (200, 200, 2000, 200)
    assert silences(turn_taking(BASE, TurnDetection(silence_ms=3000)).settings) == (350, 3000, 3000, 3000)
    taking = turn_taking(BASE, TurnDetection(threshold=0.8, prefix_padding_ms=100))
    assert taking.settings.vad_threshold == 0.8 and taking.preroll_samples == 1600


def test_semantic_vad_scales_them_by_eagerness():
    assert silences(turn_taking(BASE, TurnDetection(SEMANTIC_VAD, eagerness="high")).settings) == (210, 360, 1200, 1080)
    assert silences(turn_taking(BASE, TurnDetection(SEMANTIC_VAD, eagerness="low")).settings) == (700, 1200, 4000, 3600)
    assert turn_taking(BASE, TurnDetection(SEMANTIC_VAD, eagerness="auto")).settings == BASE


def test_manual_turns_and_no_automatic_answers_prepare_nothing():
    taking = turn_taking(BASE, TurnDetection(MANUAL, create_response=False))
    assert taking.manual and taking.in_effect.silence_ms is None
    assert not taking.settings.preemptive_generation
    assert BASE.preemptive_generation  # the server's own settings are untouched


def test_a_client_silence_selects_the_rules_and_eagerness_scales_the_cut_in_cost():
    learned = dataclasses.replace(BASE, turn_decision="learned")  # a server that runs the fitted model
    assert turn_taking(learned, TurnDetection(silence_ms=500)).settings.turn_decision == "rules"
    assert turn_taking(learned, TurnDetection()).settings.turn_decision == "learned"
    high = turn_taking(BASE, TurnDetection(SEMANTIC_VAD, eagerness="high")).settings
    low = turn_taking(BASE, TurnDetection(SEMANTIC_VAD, eagerness="low")).settings
    assert high.cut_in_cost < BASE.cut_in_cost < low.cut_in_cost
