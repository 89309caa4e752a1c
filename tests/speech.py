"""Spoken test audio for the tests: voice_agent.bench.speech, where it is synthesized, re-exported under its old name."""

from __future__ import annotations

from pathlib import Path

from voice_agent.bench.speech import silence, speech

__all__ = ["SHARED_AUDIO", "silence", "speech"]

# Recordings that are not in the repository, in a checkout's sibling folder shared/audio (see the README).
SHARED_AUDIO = Path(__file__).resolve().parents[2] / "shared" / "audio"
