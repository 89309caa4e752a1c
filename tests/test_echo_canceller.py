"""The echo canceller on a synthetic speakerphone: WebRTC's AEC3 takes the agent's voice out, keeps the user's."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from voice_agent.audio import PIPELINE_RATE
from voice_agent.config import Settings
from voice_agent.protocols.events import (
    AgentAudio,
    Clear,
    ProtocolError,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
)
from voice_agent.protocols.native import NativeProtocol
from voice_agent.turn_taking.echo_canceller import FRAME, EchoCanceller, input_canceller

RATE = PIPELINE_RATE
SECONDS = 8
USER_FROM = 6 * RATE  # the user speaks over the agent once the canceller has converged
CLIENT_FRAME = RATE // 50  # a client's 20 ms frames


def voice(seed: int, syllables_per_s: float) -> np.ndarray:
    """Noise in syllable-like bursts: broadband, as speech is, and unlike any other seed's."""
    rng = np.random.default_rng(seed)
    t = np.arange(SECONDS * RATE) / RATE
    envelope = np.abs(np.sin(np.pi * syllables_per_s * t + seed)) ** 2
    return (rng.standard_normal(len(t)) * 0.1 * envelope).astype(np.float32)


def speakerphone(played: np.ndarray) -> np.ndarray:
    """``played`` as the microphone hears it: 120 ms late, -15 dB, with a room's reflections."""
    room = np.zeros(RATE // 20)
    room[[0, 200, 500]] = [1.0, 0.6, 0.3]
    delay = int(0.12 * RATE)
    echo = np.convolve(played, room)[: len(played)] * 10 ** (-15 / 20)
    return np.concatenate([np.zeros(delay), echo[:-delay]]).astype(np.float32)


def through(canceller: EchoCanceller, played: np.ndarray, heard: np.ndarray) -> np.ndarray:
    """``heard`` through ``canceller`` in a client's frames, ``played`` sent beside it frame by frame."""
    out = []
    for start in range(0, len(heard), CLIENT_FRAME):
        canceller.output(AgentAudio(played[start : start + CLIENT_FRAME]), RATE)
        out.append(canceller.process(heard[start : start + CLIENT_FRAME]))
    return np.concatenate(out)


def likeness(out: np.ndarray, source: np.ndarray) -> float:
    """The correlation of ``out`` with ``source`` at the best lag within 20 ms: the APM delays its output by
    a few ms (8 at 16 kHz with AEC3 on)."""
    lags = range(RATE // 50)
    return max(float(np.corrcoef(out[lag:], source[: len(source) - lag])[0, 1]) for lag in lags)


def db(audio: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(audio.astype(np.float64) ** 2) + 1e-20))


def test_the_echo_is_cancelled_and_the_users_voice_kept():
    agent = voice(1, 4.0)
    echo = speakerphone(agent)
    user = np.zeros_like(agent)
    user[USER_FROM:] = voice(2, 3.0)[USER_FROM:] * 0.5
    out = through(EchoCanceller(), agent, echo + user)
    assert len(out) == len(agent)  # 20 ms frames are whole 10 ms frames: nothing held back
    converged = slice(3 * RATE, USER_FROM)  # the agent alone, after the first seconds
    assert db(echo[converged]) - db(out[converged]) > 25
    spoken = slice(USER_FROM, None)
    # The user's voice passes at about its own level (the suppressor takes a few dB while both talk), and is
    # what is left: the echo under it, 0.4 of the input's likeness, is gone too.
    assert abs(db(out[spoken]) - db(user[spoken])) < 5
    assert likeness(out[spoken], user[spoken]) > 0.6
    assert likeness(out[spoken], echo[spoken]) < 0.1


def test_input_without_echo_passes_through():
    user = voice(2, 3.0)
    out = through(EchoCanceller(), np.zeros_like(user), user)
    assert abs(db(out) - db(user)) < 1
    assert likeness(out, user) > 0.9


def test_input_in_odd_sizes_comes_out_in_whole_frames_with_the_rest_carried():
    canceller = EchoCanceller()
    sizes = [37, 160, 500, 3]
    outs = [canceller.process(np.zeros(size, np.float32)) for size in sizes]
    assert [len(out) for out in outs] == [0, 160, 480, 0]  # 37, 37, 57 and 60 carried
    assert len(canceller.process(np.zeros(FRAME - 60, np.float32))) == FRAME


def test_a_clear_drops_the_output_the_client_did_not_play():
    agent = voice(1, 4.0)
    canceller = EchoCanceller()
    canceller.played(agent[: RATE // 2], RATE)
    canceller.output(Clear(), RATE)
    # Nothing played after the clear: input that merely resembles the dropped output is not touched by it.
    user = agent[: RATE // 2] * 0.3
    out = canceller.process(user)
    assert abs(db(out) - db(user)) < 1


def test_output_starting_while_the_input_comes_late_waits_as_long_in_the_reverse_stream():
    # A client that sends late (busy, or a network's jitter) holds the echo of a new answer back as long: the
    # reverse stream must too, or AEC3 looks for a new delay at each answer.
    now = [100.0]
    canceller = EchoCanceller(clock=lambda: now[0])
    for _ in range(50):  # a second of input, on time
        now[0] += 0.02
        canceller.process(np.zeros(CLIENT_FRAME, np.float32))
    now[0] += 0.02 + 0.1  # the next frame comes 100 ms late
    canceller.process(np.zeros(CLIENT_FRAME, np.float32))
    answer = np.ones(RATE // 10, np.float32) * 0.5
    canceller.played(answer, RATE)
    assert abs(int(np.flatnonzero(canceller._played)[0]) - int(0.1 * RATE)) <= 1
    queued = len(canceller._played)
    canceller.played(answer, RATE)  # more of the same answer, right after it: no more silence before it
    assert len(canceller._played) - queued == len(answer)


@pytest.mark.parametrize(
    ("setting", "client_cancels", "noise", "expected"),
    [
        ("off", False, 0, None),
        ("auto", False, 0, True),
        ("auto", True, 0, None),
        ("auto", True, 1, False),  # noise suppression alone
        ("on", True, 0, True),
    ],
)
def test_which_sessions_cancel_echo(setting, client_cancels, noise, expected):
    settings = dataclasses.replace(Settings(), echo_cancellation=setting, noise_suppression=noise)
    canceller = input_canceller(settings, client_cancels_echo=client_cancels)
    assert (canceller is None) == (expected is None)
    if canceller is not None:
        assert canceller.cancels_echo is expected


def test_a_start_says_whether_its_input_is_echo_cancelled():
    codec = NativeProtocol()
    (started,) = codec.receive_text('{"type": "start", "sample_rate": 16000, "echo_cancelled": true}')
    assert isinstance(started, SessionStarted) and started.options.get("echo_cancelled") is True
    error, started = NativeProtocol().receive_text('{"type": "start", "echo_cancelled": "yes"}')
    assert isinstance(error, ProtocolError) and "echo_cancelled" in error.message
    assert isinstance(started, SessionStarted) and "echo_cancelled" not in started.options


class Canceller:
    """Records what a session gives its canceller; ``silencing``: hands the VAD silence, as if all were echo."""

    def __init__(self) -> None:
        self.outputs: list[type] = []
        self.heard = 0
        self.silencing = False

    def output(self, event, rate: int) -> None:
        self.outputs.append(type(event))

    def process(self, samples: np.ndarray) -> np.ndarray:
        self.heard += len(samples)
        return np.zeros_like(samples) if self.silencing else samples


async def test_a_session_gives_its_canceller_what_it_plays_and_the_vad_only_what_it_lets_through():
    from tests.test_session import Harness, quiet, tone

    h = Harness(echo_cancellation="on")
    assert isinstance(h.session.listener.echo_canceller, EchoCanceller)
    canceller = Canceller()
    h.session.listener.echo_canceller = canceller  # type: ignore[assignment]
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.4))
    await h.until(lambda: h.finals("agent"))
    assert canceller.heard == int(0.9 * RATE)
    assert canceller.outputs.count(AgentAudio) == len(h.of(AgentAudio)) > 0
    turns = len(h.finals("user"))
    canceller.silencing = True
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.4))
    await asyncio.sleep(0.3)
    assert len(h.finals("user")) == turns  # the VAD heard no second turn
    await h.session.close()


@pytest.mark.parametrize(("setting", "kept"), [("auto", False), ("on", True)])
async def test_a_client_that_cancels_echo_itself_turns_auto_off(setting, kept):
    from tests.test_session import Harness

    h = Harness(echo_cancellation=setting)
    h.session.handle(SessionStarted(RATE, {"echo_cancelled": True}))
    assert (h.session.listener.echo_canceller is not None) is kept
    await h.session.close()


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples**2)))


async def test_a_sessions_noise_suppression_is_its_clients_choice():
    from tests.test_session import Harness

    h = Harness()  # the server suppresses no noise, cancels no echo
    assert h.session.listener.echo_canceller is None
    h.session.handle(SessionUpdate(noise_suppression=True))
    canceller = h.session.listener.echo_canceller
    assert isinstance(canceller, EchoCanceller) and canceller.suppresses_noise and not canceller.cancels_echo
    assert h.of(SessionConfig)[-1].noise_suppression is True
    hiss = (np.random.default_rng(1).standard_normal(RATE) * 0.05).astype(np.float32)
    await h.feed(hiss, realtime=False)
    timeline = h.session.listener.timeline
    heard = timeline.slice(timeline.received - RATE // 4, timeline.received)
    assert len(heard) == RATE // 4 and rms(heard) < rms(hiss) / 2  # WebRTC's NS took out more than 6 dB
    h.session.handle(SessionUpdate(noise_suppression=False))
    assert h.session.listener.echo_canceller is None and h.of(SessionConfig)[-1].noise_suppression is False
    await h.session.close()


@pytest.mark.parametrize(("setting", "echo"), [("on", True), ("auto", False)])
async def test_noise_suppression_keeps_echo_cancellation_as_the_settings_decide(setting, echo):
    from tests.test_session import Harness

    h = Harness(echo_cancellation=setting, noise_suppression=1)
    h.session.handle(SessionStarted(RATE, {"echo_cancelled": True}))
    h.session.handle(SessionUpdate(noise_suppression=False))
    assert (h.session.listener.echo_canceller is not None) is echo
    h.session.handle(SessionUpdate(noise_suppression=True))
    canceller = h.session.listener.echo_canceller
    assert isinstance(canceller, EchoCanceller) and canceller.suppresses_noise and canceller.cancels_echo is echo
    await h.session.close()
