"""What the VAD hears once the agent's echo is taken out, with real Silero and the agent's real voice: what is
left of the echo alone is not speech, a user's voice over it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.test_echo_suppression import through_room
from voice_agent.echo_suppression import suppress_echo
from voice_agent.engines.vad import SileroVAD
from voice_agent.replay.script import load_audio
from voice_agent.turn_taking.own_voice import MIN_SPEECH_WINDOWS, speech_left

pytestmark = pytest.mark.models

RATE = 16000
# Committed renditions of the embedded Piper voice: Piper samples its prosody noise, and a new rendition at every
# run left more residue now and then (13 % of stretches once, against 0 to 6 % in eight others).
TURNS = Path(__file__).resolve().parents[1] / "voice_agent" / "bench" / "turns" / "bargein_turns"
STRETCH = 15  # VAD windows: the 480 ms of input a barge-in check looks at


@pytest.fixture(scope="module")
def vad():
    return SileroVAD()


def recorded(name: str) -> np.ndarray:
    return load_audio(TURNS / f"{name}.flac", RATE)


@pytest.fixture(scope="module")
def answer():
    # 12 s of the voice, standing in for an answer of the agent's.
    return np.concatenate([recorded(name) for name in ("q_menu", "q_directions", "q_wine", "q_history")])


def heard_speech(vad: SileroVAD, heard: np.ndarray, played: np.ndarray, delay_ms: float) -> np.ndarray:
    cleaned = suppress_echo(heard, played, round(delay_ms / 10))
    return speech_left(heard, cleaned, np.array(vad.stream().process(cleaned)), 0.5)


@pytest.mark.parametrize("gain_db, delay_ms, seed", [(-10.0, 80.0, 8), (-12.0, 120.0, 4), (-16.0, 60.0, 7)])
def test_what_is_left_of_the_echo_alone_is_not_speech(vad, answer, gain_db, delay_ms, seed):
    # Silero hears speech in what suppression leaves of the echo: without the share of the input each window
    # kept, nearly every such stretch held three speech windows or more, and the agent paused for its own voice.
    # Some rooms leave more (docs/results/bargein.md).
    speech_windows = heard_speech(vad, through_room(answer, gain_db, delay_ms, seed), answer, delay_ms)
    stretches = [speech_windows[at : at + STRETCH] for at in range(0, len(speech_windows) - STRETCH, 5)]
    with_speech = sum(int(stretch.sum()) >= MIN_SPEECH_WINDOWS for stretch in stretches)
    assert with_speech <= 0.1 * len(stretches), f"{with_speech} of {len(stretches)}"


@pytest.mark.parametrize("gain_db, delay_ms, seed", [(-10.0, 80.0, 8), (-16.0, 60.0, 7)])
def test_a_user_over_the_echo_is_speech_at_once(vad, answer, gain_db, delay_ms, seed):
    user = recorded("hold_on")
    at = 2 * RATE
    heard = through_room(answer, gain_db, delay_ms, seed)
    heard[at : at + len(user)] += user[: len(heard) - at]
    speech_windows = heard_speech(vad, heard, answer, delay_ms)
    user_alone = np.zeros_like(heard)
    user_alone[at : at + len(user)] = user[: len(heard) - at]
    user_windows = (np.array(vad.stream().process(user_alone)) >= 0.5)[: len(speech_windows)]
    onset = int(np.flatnonzero(user_windows)[0])
    # Within the user's first 256 ms, and most of their speech.
    assert speech_windows[onset : onset + 8].sum() >= MIN_SPEECH_WINDOWS
    assert (speech_windows & user_windows).sum() >= 0.8 * user_windows.sum()
