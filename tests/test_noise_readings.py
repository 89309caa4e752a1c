"""What real Whisper makes of a noise over the agent's echo once the echo is out: words, often, but it judges them
no speech; and of a user's interruption over the same echo: speech. The rooms and moments are ones where the noise
left speech for the VAD (drawn as scripts/bargein_eval's echo rig draws them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voice_agent.echo_suppression import HOP, suppress_echo
from voice_agent.engines.stt import WhisperSTT
from voice_agent.engines.vad import SileroVAD
from voice_agent.replay.echo import EchoPath
from voice_agent.replay.script import load_audio
from voice_agent.turn_taking.own_voice import speech_left, speech_only

pytestmark = pytest.mark.models

RATE = 16000
TURNS = Path(__file__).resolve().parents[1] / "voice_agent" / "bench" / "turns" / "bargein_turns"
# (noise, the room's path, where in the answer the noise begins, in samples)
NOISES = [
    ("noise_hiss_long", EchoPath(-24.3, 59.8, 319577159), 39656),  # read "You"
    ("noise_hiss_long", EchoPath(-11.9, 95.5, 137899453), 45490),  # read as nothing
    ("noise_laugh", EchoPath(-21.5, 114.0, 313543416), 36169),  # "I'm gonna go to the end."
    ("noise_laugh", EchoPath(-15.8, 238.2, 817064636), 47800),  # "I'm gonna go get it."
]
INTERRUPTIONS = ["cancel_that", "not_what_i_asked", "wait_question", "hold_on", "repeat_that"]


@pytest.fixture(scope="module")
def engines():
    return SileroVAD(), WhisperSTT()


def recorded(name: str) -> np.ndarray:
    return load_audio(TURNS / f"{name}.flac", RATE)


def read_over_echo(engines, sound: np.ndarray, path: EchoPath, at: int):
    """``sound`` begun ``at`` samples into an answer whose echo comes back through ``path``, as the barge-in check
    reads it: the echo out, and only the speech the VAD hears then; None when it hears none."""
    vad, stt = engines
    answer = np.concatenate([recorded(name) for name in ("q_menu", "q_directions", "q_wine", "q_history")])
    delay = int(path.delay_ms * RATE / 1000)
    echo = np.convolve(np.concatenate([np.zeros(delay, np.float32), answer]), path.room_response(RATE))
    heard = echo[: len(answer)].astype(np.float32)
    heard[at : at + len(sound)] += sound
    heard, played = heard[at - RATE : at + len(sound)], answer[at - RATE : at + len(sound)]
    cleaned = suppress_echo(heard, played, delay // HOP)[-len(sound) :]
    speech = speech_left(heard[-len(sound) :], cleaned, np.array(vad.stream().process(cleaned)), 0.5)
    gated = speech_only(cleaned, speech)
    return None if gated is None else stt.read_blocking(gated)


@pytest.mark.parametrize("noise, path, at", NOISES)
def test_a_noise_over_the_echo_is_judged_no_speech(engines, noise, path, at):
    reading = read_over_echo(engines, recorded(noise), path, at)
    assert reading is not None  # the VAD heard speech in it
    assert reading.no_speech, reading


@pytest.mark.parametrize("noise, path, at", NOISES)
def test_an_interruption_over_the_same_echo_is_speech(engines, noise, path, at):
    for name in INTERRUPTIONS:
        reading = read_over_echo(engines, recorded(name), path, at)
        assert reading is not None and reading.text and not reading.no_speech, (name, reading)
