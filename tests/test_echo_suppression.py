"""Taking the agent's echo out of the barge-in check's audio: the echo goes, the user's sound stays."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_echo_reference import voice
from voice_agent.echo_reference import INPUT_SAMPLES, EchoReference
from voice_agent.echo_suppression import suppress_echo
from voice_agent.engines.vad import WINDOW
from voice_agent.replay.echo import EchoPath
from voice_agent.turn_taking.own_voice import MIN_SPEECH_WINDOWS, speech_only, without_lone_windows

RATE = 16000


def through_room(agent: np.ndarray, gain_db: float, delay_ms: float, seed: int = 1) -> np.ndarray:
    room = EchoPath(gain_db, delay_ms, seed).room_response(RATE)
    delay = int(delay_ms * RATE / 1000)
    return np.convolve(np.concatenate([np.zeros(delay, np.float32), agent]), room)[: len(agent)].astype(np.float32)


def db(x: np.ndarray) -> float:
    return 10 * np.log10(float(np.sum(x.astype(np.float64) ** 2)) + 1e-20)


@pytest.mark.parametrize("gain_db, delay_ms, seed", [(-10.0, 150.0, 1), (-18.0, 60.0, 2), (-25.0, 240.0, 3)])
def test_the_echo_alone_is_turned_down(gain_db, delay_ms, seed):
    agent = voice(1, 2.0)
    echo = through_room(agent, gain_db, delay_ms, seed)
    cleaned = suppress_echo(echo, agent, round(delay_ms / 10))
    assert len(cleaned) == len(echo)
    assert db(echo[RATE // 2 :]) - db(cleaned[RATE // 2 :]) >= 15  # measured 26 to 27 dB (the floor: 30)


def test_a_user_over_the_echo_keeps_their_sound():
    agent = voice(1, 2.0)
    user = np.zeros_like(agent)
    user[RATE : RATE + RATE // 2] = voice(7, 0.5, level=0.07)
    heard = through_room(agent, -10.0, 150.0) + user
    cleaned = suppress_echo(heard, agent, 15)
    part = slice(RATE, RATE + RATE // 2)
    # The test voices share the agent's pitch, the worst case: the bins the echo fills are turned down under the
    # user too (measured: 4 dB of the user's level lost, correlation 0.72 with the user's own sound).
    assert abs(db(cleaned[part]) - db(user[part])) <= 6
    assert np.corrcoef(cleaned[part], user[part])[0, 1] >= 0.6
    # Before the user, echo only: turned well down.
    assert db(heard[RATE // 2 : RATE]) - db(cleaned[RATE // 2 : RATE]) >= 12


def test_nothing_played_leaves_the_input_as_it_was():
    heard = voice(3, 1.0)
    assert suppress_echo(heard, np.zeros_like(heard), 10) is heard


def played_and_heard(gain_db: float | None, delay_ms: float, user_level: float = 0.0):
    """The agent plays 2 s from 0.5 s; the microphone has its echo (None: a headset, no echo) and a user."""
    reference = EchoReference(origin=0.0)
    agent = voice(1, 2.0)
    for sent in range(0, len(agent), 320):
        reference.played(agent[sent : sent + 320], RATE, 0.5 + sent / RATE)
    heard = np.zeros(int(2.5 * RATE), np.float32)
    if gain_db is not None:
        heard[RATE // 2 :] += through_room(agent, gain_db, delay_ms)
    if user_level:
        heard[int(1.8 * RATE) : int(2.3 * RATE)] += voice(7, 0.5, level=user_level)
    return reference, heard


def listened(reference: EchoReference, heard: np.ndarray, until_s: float) -> EchoReference:
    """The listener's echo test on each 32 ms window up to ``until_s``, as it finds the path."""
    for end in range(INPUT_SAMPLES, int(until_s * RATE), WINDOW):
        reference.explains(heard[end - INPUT_SAMPLES : end], end / RATE)
    return reference


@pytest.mark.parametrize("gain_db, delay_ms", [(-10.0, 50.0), (-18.0, 150.0), (-25.0, 250.0)])
def test_the_echo_path_is_found_on_the_echo_before_the_user(gain_db, delay_ms):
    reference, heard = played_and_heard(gain_db, delay_ms, user_level=0.07)
    assert reference.echo_path(heard, 2.5, int(1.8 * RATE)) is None  # no echo found yet: nothing to go on
    path = listened(reference, heard, 1.8).echo_path(heard, 2.5, int(1.8 * RATE))
    assert path is not None
    played, lag = path
    assert len(played) == len(heard)
    assert abs(lag - delay_ms / 10) <= 2


def test_an_answers_echo_path_is_not_fitted_on_a_lag_its_echo_has_barely_reached():
    # 400 ms into an answer, a -10 dB echo 168 ms late was taken out at 430 ms, a lag at which the answer's
    # onset had come back for a few blocks and correlated with the input's by chance (the echo rig): its own
    # words were left, and cleared it. Here the echo of the answer's first 80 ms has come back at 400 ms.
    reference = EchoReference(origin=0.0)
    first, second = voice(1, 1.5), voice(2, 1.0)
    heard = np.zeros(int(3.48 * RATE), np.float32)
    heard[: len(first)] += through_room(first, -18.0, 100.0)
    for sent in range(0, len(first), 320):
        reference.played(first[sent : sent + 320], RATE, sent / RATE)
    listened(reference, heard, 1.5)  # the call's path: 100 ms
    for sent in range(0, len(second), 320):
        reference.played(second[sent : sent + 320], RATE, 3.0 + sent / RATE)
    heard[int(3.4 * RATE) :] += 0.3 * second[: int(0.08 * RATE)]
    path = reference.echo_path(heard[-RATE:], 3.48, RATE)
    assert path is not None
    assert path[1] != 40


def test_no_echo_path_for_a_headset_or_a_quiet_loudspeaker():
    reference, heard = played_and_heard(None, 0.0, user_level=0.1)
    assert listened(reference, heard, 2.5).echo_path(heard, 2.5, int(1.8 * RATE)) is None
    # Nothing played for a long time: no path either.
    assert EchoReference(origin=0.0).echo_path(heard, 2.5, int(1.8 * RATE)) is None


def test_only_the_speech_windows_are_kept():
    audio = np.ones(10 * WINDOW, np.float32)
    speech = np.array([0, 0, 0, 1, 1, 1, 0, 0, 0, 0], bool)
    gated = speech_only(audio, speech)
    assert gated is not None
    kept = gated.reshape(10, WINDOW).max(axis=1)
    assert kept.tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0, 0]  # one window of margin either side
    assert speech_only(audio, np.arange(10) < MIN_SPEECH_WINDOWS - 1) is None


def test_a_lone_window_of_speech_is_what_is_left_of_the_echo():
    speech = np.array([1, 0, 0, 1, 0, 1, 1, 0, 0, 1], bool)
    assert without_lone_windows(speech).astype(int).tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0, 0]
    # Scattered over a loud echo, three such windows are no speech to transcribe.
    assert speech_only(np.ones(10 * WINDOW, np.float32), without_lone_windows(speech)) is None


def hiss_over_the_echo(listen_until_s: float):
    """The agent plays 4 s, paced in real time; its echo comes back -18 dB, 150 ms late; a loud hiss starts at
    2.7 s, before the speech the check is about (at 3.6 s). The listener's echo test runs up to ``listen_until_s``."""
    reference = EchoReference(origin=0.0)
    agent = voice(1, 4.0)
    heard = through_room(agent, -18.0, 150.0)
    heard[int(2.7 * RATE) :] += np.random.default_rng(5).normal(0, 0.15, len(heard) - int(2.7 * RATE))
    for sent in range(0, len(agent), 320):
        reference.played(agent[sent : sent + 320], RATE, sent / RATE)
        end = sent + 320
        if end % WINDOW < 320 and INPUT_SAMPLES <= end <= listen_until_s * RATE:
            reference.explains(heard[end - INPUT_SAMPLES : end], end / RATE)
    return reference, heard


def test_a_loud_sound_over_an_echo_found_again_and_again_keeps_its_path():
    reference, heard = hiss_over_the_echo(2.6)  # the echo test explained separate windows from 0.5 s on
    path = reference.echo_path(heard, 4.0, int(3.6 * RATE))
    assert path is not None
    assert abs(path[1] - 15) <= 2


def test_a_loud_sound_over_a_path_found_once_is_no_echo():
    # Found in one window only: it may be another voice keeping the output's rhythm by chance.
    reference, heard = hiss_over_the_echo(0.9)
    assert reference.echo_path(heard, 4.0, int(3.6 * RATE)) is None
