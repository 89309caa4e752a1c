"""Stops the agent made for its own echo (voice_agent/replay/echo_stops.py)."""

import pytest

from voice_agent.replay.echo_stops import echo_stops, user_windows
from voice_agent.replay.measure import AudioIn, MessageIn


def frames(at: float, count: int) -> list[AudioIn]:
    return [AudioIn(at, 0.02, 0.3) for _ in range(count)]


def user_final(at: float) -> MessageIn:
    return MessageIn(at, "transcript", {"role": "user", "text": "hello", "final": True})


def test_only_what_happens_outside_the_users_windows_counts_as_echo():
    windows = user_windows([(0.0, 1.0), (10.0, 10.5)], settle_s=2.0)  # (0, 3) and (10, 12.5)
    received = [
        user_final(1.5),  # the user's own turn
        *frames(2.0, 40),  # an answer playing 2.0 to 2.8 s
        *frames(3.3, 50),  # ...silent 500 ms at 2.8 (inside the window: not counted), on to 4.3
        *frames(4.5, 50),  # ...silent 200 ms at 4.3, outside: an echo pause
        MessageIn(6.0, "clear"),  # the agent gave up its answer for nobody
        user_final(6.5),  # and answered its own echo
        *frames(7.0, 50),
        MessageIn(10.8, "clear"),  # the user's barge-in
    ]
    stops = echo_stops(received, windows)
    assert stops == {"clears": [6.0], "pauses": [pytest.approx(4.3)], "turns": [6.5]}


def test_a_glitch_or_a_gap_with_a_new_turn_in_it_is_no_pause():
    received = [*frames(0.0, 10), *frames(0.23, 10), user_final(1.0), *frames(2.0, 5)]
    assert echo_stops(received, [])["pauses"] == []  # 30 ms glitch; the gap before 2.0 holds a user turn
