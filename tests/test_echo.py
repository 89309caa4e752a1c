"""The echo rig: the agent's played audio comes back into the microphone (voice_agent/replay/echo.py)."""

import numpy as np
import pytest

from voice_agent.replay.echo import DELAY_MS, GAIN_DB, Echo, EchoPath

RATE = 16000
FRAME = 320


def level_db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-20)


def record(echo: Echo, seconds: float) -> np.ndarray:
    """The microphone's echo, frame by frame, as the sender would take it, from the echo's origin."""
    frames = [echo.capture(echo.origin + (i + 1) * FRAME / RATE, FRAME) for i in range(int(seconds * RATE / FRAME))]
    return np.concatenate(frames)


def test_the_room_response_has_the_paths_energy_and_its_seed_makes_it_repeatable():
    path = EchoPath(gain_db=-20.0, delay_ms=100.0, seed=7)
    room = path.room_response(RATE)
    assert 10 * np.log10(np.sum(room.astype(np.float64) ** 2)) == pytest.approx(-20.0, abs=0.01)
    assert np.array_equal(room, EchoPath(-20.0, 100.0, 7).room_response(RATE))
    assert not np.array_equal(room, EchoPath(-20.0, 100.0, 8).room_response(RATE))


def test_played_audio_comes_back_late_and_quieter_within_the_issues_ranges():
    echo = Echo(RATE, seed=3, origin=100.0)
    noise = (0.3 * np.random.default_rng(0).standard_normal(RATE // 2)).astype(np.float32)
    echo.played(100.2, noise)  # arrives 200 ms in, plays 200 to 700 ms
    mic = record(echo, 1.5)
    [path] = echo.paths
    assert GAIN_DB[0] <= path["gain_db"] <= GAIN_DB[1] and DELAY_MS[0] <= path["delay_ms"] <= DELAY_MS[1]
    onset = np.flatnonzero(np.abs(mic) > 1e-4)[0] / RATE
    assert onset == pytest.approx(0.2 + path["delay_ms"] / 1000, abs=0.003)
    steady = mic[int((onset + 0.1) * RATE) : int((onset + 0.4) * RATE)]
    assert level_db(steady) - level_db(noise) == pytest.approx(path["gain_db"], abs=1.5)
    assert not mic[int((onset + 0.5 + 0.07) * RATE) :].any()  # silent once the room has rung out


def test_clear_drops_what_has_not_played_and_a_new_answer_gets_a_new_path_when_asked():
    echo = Echo(RATE, seed=1, origin=0.0, paths="answer")
    echo.played(0.0, np.full(RATE, 0.5, np.float32))  # one second queued
    echo.cleared(0.3)
    mic = record(echo, 2.0)
    delay = echo.paths[0]["delay_ms"] / 1000
    assert mic[int((0.1 + delay) * RATE)] != 0.0
    assert not mic[int((0.3 + delay + 0.07) * RATE) :].any()
    echo.played(2.5, np.full(FRAME, 0.5, np.float32))
    assert len(echo.paths) == 2 and echo.paths[1]["at_s"] == 2.5


def test_frames_queue_back_to_back_as_a_player_plays_them():
    echo = Echo(RATE, seed=2, origin=0.0)
    for _ in range(3):
        echo.played(0.0, np.full(FRAME, 0.5, np.float32))  # three frames in one burst: 60 ms of sound
    mic = record(echo, 1.0)
    delay = echo.paths[0]["delay_ms"] / 1000
    sounding = np.flatnonzero(np.abs(mic) > 1e-4) / RATE
    assert sounding[0] == pytest.approx(delay, abs=0.002)
    assert 0.06 <= sounding[-1] - sounding[0] <= 0.06 + 0.065  # plus the room's ring


def test_one_path_holds_for_the_whole_call_by_default():
    echo = Echo(RATE, seed=1, origin=0.0)
    echo.played(0.0, np.full(FRAME, 0.5, np.float32))
    echo.played(2.5, np.full(FRAME, 0.5, np.float32))  # a later answer
    assert len(echo.paths) == 1


def test_the_reverberant_rooms_tail_is_louder_than_its_direct_sound_and_rings_longer():
    room = EchoPath(-15.0, 120.0, seed=4, room="reverberant").room_response(RATE)
    energy = room.astype(np.float64) ** 2
    assert 10 * np.log10(np.sum(energy)) == pytest.approx(-15.0, abs=0.01)
    assert np.sum(energy[1:]) > 2 * energy[0]  # the tail holds more than the direct tap (about 6 dB more)
    small = EchoPath(-15.0, 120.0, seed=4).room_response(RATE)
    assert len(room) > 5 * len(small)
    assert np.sum(energy[int(0.1 * RATE) :]) > 0.01 * np.sum(energy)  # still ringing past 100 ms


def test_an_unknown_room_or_path_rule_is_refused():
    with pytest.raises(ValueError):
        Echo(RATE, room="hall")
    with pytest.raises(ValueError):
        Echo(RATE, paths="turn")
