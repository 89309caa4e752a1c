"""Settings are parsed once, from flags and the environment, into real bools, numbers and lists."""

from __future__ import annotations

import argparse

import pytest

from voice_agent.config import Settings, add_arguments


def settings(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return Settings.from_sources(parser.parse_args(argv), environ or {})


def test_defaults_are_typed():
    s = settings([])
    assert s.preemptive_generation is True and s.first_chunk_phrase_breaks is True and s.llm_enforce_eager is False
    assert "mm hm" in s.barge_in_backchannels and "yeah" in s.barge_in_backchannels
    assert s.allowed_origins == ()


def test_bool_flags_turn_on_and_off():
    s = settings(["--no-preemptive-generation", "--llm-enforce-eager"])
    assert s.preemptive_generation is False and s.llm_enforce_eager is True


@pytest.mark.parametrize(
    "raw, value",
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("false", False), ("NO", False)],
)
def test_bools_from_the_environment(raw, value):
    assert settings([], {"VOICE_AGENT_FIRST_CHUNK_PHRASE_BREAKS": raw}).first_chunk_phrase_breaks is value


def test_a_bad_bool_in_the_environment_is_refused_with_its_name():
    with pytest.raises(SystemExit, match="VOICE_AGENT_PREEMPTIVE_GENERATION='maybe'"):
        settings([], {"VOICE_AGENT_PREEMPTIVE_GENERATION": "maybe"})


def test_lists_are_comma_separated_in_flags_and_environment():
    environ = {"VOICE_AGENT_ALLOWED_ORIGINS": " https://a.example , https://b.example ,"}
    s = settings(["--barge-in-backchannels", "yeah, mm hm"], environ)
    assert s.barge_in_backchannels == ("yeah", "mm hm")
    assert s.allowed_origins == ("https://a.example", "https://b.example")
    assert settings(["--barge-in-backchannels", ""]).barge_in_backchannels == ()


def test_flags_win_over_the_environment():
    s = settings(["--preemptive-generation", "--port", "9000"], {"VOICE_AGENT_PREEMPTIVE_GENERATION": "0"})
    assert s.preemptive_generation is True and s.port == 9000
    assert settings([], {"VOICE_AGENT_PORT": "9001"}).port == 9001


def test_choices_still_hold():
    with pytest.raises(SystemExit):
        settings([], {"VOICE_AGENT_LLM": "gpt"})
