"""Stops the agent made for its own echo (voice_agent/replay/echo_stops.py)."""

import pytest

from voice_agent.replay.echo_stops import echo_stops, user_windows
from voice_agent.replay.measure import AudioIn, MessageIn


def frames(at: float, count: int) -> list[AudioIn]:
    return [AudioIn(at, 0.02, 0.3) for _ in range(count)]


def user_final(at: float) -> MessageIn:
    return MessageIn(at, "transcript", {"role": "user", "text": "hello", "final": True})


def agent_final(at: float) -> MessageIn:
    return MessageIn(at, "transcript", {"role": "agent", "text": "Hello there.", "final": True})


def test_user_windows_wait_longer_after_speech_over_the_agent():
    assert user_windows([(1.0, 2.0, False), (5.0, 6.0, True)]) == [(1.0, 2.5), (5.0, 8.0)]


def test_only_what_happens_outside_the_users_windows_counts_as_echo():
    turns = [(0.0, 1.0, False), (10.0, 10.5, True)]  # a question, and a barge-in probe
    received = [
        user_final(1.2),  # the question's transcript
        *frames(1.4, 20),  # the answer, 1.4 to 1.8 s: falls silent at 1.8, outside the windows...
        MessageIn(2.1, "clear"),  # ...and gives up once it has checked the words it heard: its own
        user_final(2.2),  # it answers its own echo
        *frames(3.0, 50),  # 3.0 to 4.0, silent 200 ms, on from 4.2 to 5.2: an echo pause
        *frames(4.2, 50),
        agent_final(5.1),  # that answer ended on its own at 5.2
        *frames(6.0, 20),  # the next one falls silent at 6.4 for good, and its final only comes at 9.0
        agent_final(9.0),
        *frames(10.0, 10),  # an answer the probe at 10.0 s interrupts: cleared inside its window
        MessageIn(10.3, "clear"),
    ]
    stops = echo_stops(received, turns)
    assert stops == {
        "clears": [pytest.approx(1.8)],
        "pauses": [pytest.approx(4.0)],
        "stopped": [pytest.approx(6.4)],
        "turns": [2.2],
        "cut_ins": [],
    }


def test_a_glitch_an_answers_end_or_a_gap_with_a_new_turn_in_it_is_no_stop():
    received = [*frames(0.0, 10), *frames(0.23, 10), agent_final(0.4), user_final(1.0), *frames(2.0, 5)]
    received.append(agent_final(2.2))
    assert echo_stops(received, [(0.5, 0.6, True)]) == {
        "clears": [],
        "pauses": [],
        "stopped": [],
        "turns": [],
        "cut_ins": [],
    }


def test_a_chunk_a_little_late_is_no_stop():
    # 80 ms without the agent's voice, mid-answer: longer than the glitches bridged, shorter than a pause.
    received = [*frames(0.0, 10), *frames(0.28, 50), agent_final(1.3)]
    assert echo_stops(received, [])["stopped"] == []


def test_a_slow_final_transcript_of_the_users_own_turn_is_theirs():
    # The user stops at 1.0 s; on a busy machine the final comes at 2.0 s, before any answer.
    received = [user_final(2.0), *frames(2.5, 10), user_final(4.0)]
    assert echo_stops(received, [(0.0, 1.0, False)])["turns"] == [4.0]


def agent_partial(at: float) -> MessageIn:
    return MessageIn(at, "transcript", {"role": "agent", "text": "Hello there. More", "final": False})


def test_a_chunk_synthesized_late_is_no_pause_and_a_pause_at_a_chunks_start_is_one():
    late = [agent_partial(0.0), *frames(0.0, 10), agent_partial(0.5), *frames(0.5, 10), agent_final(0.75)]
    assert echo_stops(late, [])["pauses"] == []
    # The chunk was announced while the one before still played (sent ahead), then its audio held back.
    held = [agent_partial(0.0), *frames(0.0, 10), agent_partial(0.15), *frames(0.5, 10), agent_final(0.75)]
    assert echo_stops(held, [])["pauses"] == [pytest.approx(0.2)]


def test_a_turn_the_agent_began_to_answer_at_a_pause_is_spoken_over_it_from_then_on():
    # The user pauses at a comma at 1.0 s and goes on from 1.5 to 2.5 s; the agent answered the first half at
    # 1.3 s and gives up once it has checked the words over it, 600 ms past the user's end: theirs, not an echo's.
    received = [user_final(1.25), *frames(1.3, 30), MessageIn(3.1, "clear"), user_final(3.3)]
    stops = echo_stops(received, [(0.0, 2.5, False)])
    assert stops["cut_ins"] == [pytest.approx(1.3)]
    assert stops["clears"] == [] and stops["turns"] == []


def test_an_agent_that_began_to_talk_after_the_turn_did_not_cut_in():
    received = [user_final(1.2), *frames(1.4, 20), MessageIn(2.1, "clear"), user_final(2.2)]
    stops = echo_stops(received, [(0.0, 1.0, False), (1.5, 1.8, True)])
    assert stops["cut_ins"] == []  # 1.4 is past the first turn's end; the second is a barge-in over the agent
