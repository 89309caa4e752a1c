"""The agent's output as a reference: its echo through a room is explained, a user's voice over it is not."""

from __future__ import annotations

import asyncio
import time
import zlib

import numpy as np
import pytest

from tests.test_session import Harness, ReadsAsSpeech, ScriptedSTT, record_pauses, tone, watch_pauses
from voice_agent.echo_reference import (
    BLOCK,
    INPUT_SAMPLES,
    MAX_LAG_S,
    QUIET_INPUT_SAMPLES,
    SETTLE_BLOCKS,
    EchoReference,
)
from voice_agent.protocols.events import AgentAudio, AudioReceived, Clear, Transcript
from voice_agent.replay.echo import Echo, EchoPath
from voice_agent.turn_taking.user_turn import SPEECH_TAIL_SAMPLES, UserTurn

RATE = 16000
FRAME = 320  # the pacer's 20 ms frames
CHECK = 512  # the VAD's 32 ms windows


def voice(seed: int, seconds: float, level: float = 0.1) -> np.ndarray:
    """Speech-like: 80-250 ms syllables of a 140 Hz voice with breath noise, 20-120 ms apart."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    envelope = np.zeros(n)
    at = 0
    while at < n:
        length = int(rng.uniform(0.08, 0.25) * RATE)
        envelope[at : at + length] = np.sin(np.linspace(0, np.pi, length))[: n - at]
        at += length + int(rng.uniform(0.02, 0.12) * RATE)
    t = np.arange(n) / RATE
    carrier = 0.6 * np.sin(2 * np.pi * 140 * t) + 0.3 * np.sin(2 * np.pi * 280 * t) + 0.3 * rng.standard_normal(n)
    return (level * envelope * carrier).astype(np.float32)


def _through(room_gain_db: float, delay_ms: float, played: np.ndarray) -> np.ndarray:
    room = EchoPath(room_gain_db, delay_ms, seed=1).room_response(RATE)
    delayed = np.concatenate([np.zeros(int(delay_ms * RATE / 1000), np.float32), played])
    return np.convolve(delayed, room)[: len(played)].astype(np.float32)


def _listen(playing: np.ndarray, mic: np.ndarray) -> list[tuple[float, bool]]:
    """``playing`` sent in real time (silence: nothing sent), and ``mic`` checked at each window as it comes."""
    reference = EchoReference(origin=0.0)
    results = []
    for sent in range(0, len(playing), FRAME):
        if playing[sent : sent + FRAME].any():
            reference.played(playing[sent : sent + FRAME], RATE, sent / RATE)
        end = sent + FRAME
        if end % CHECK < FRAME and end >= INPUT_SAMPLES:
            results.append((end / RATE, reference.explains(mic[end - INPUT_SAMPLES : end], end / RATE)))
    return results


def _between(results: list[tuple[float, bool]], from_s: float, to_s: float) -> list[bool]:
    return [explained for at, explained in results if from_s <= at < to_s]


def replay(gain_db: float, delay_ms: float, user: np.ndarray | None = None, user_at_s: float = 1.5, echo: bool = True):
    """The agent says 3 s, paced in real time; the microphone hears the room's echo (and the user).

    Returns (time, explained) for each 32 ms input window once a whole input window is in.
    """
    agent = voice(1, 3.0)
    mic = 1e-4 * np.random.default_rng(9).standard_normal(len(agent) + RATE).astype(np.float32)
    if echo:
        mic[: len(agent)] += _through(gain_db, delay_ms, agent)
    if user is not None:
        start = int(user_at_s * RATE)
        mic[start : start + len(user)] += user
    return _listen(agent, mic)


@pytest.mark.parametrize("gain_db", [-10.0, -18.0, -25.0])
@pytest.mark.parametrize("delay_ms", [50.0, 150.0, 250.0])
def test_echo_alone_is_explained(gain_db, delay_ms):
    windows = [explained for at, explained in replay(gain_db, delay_ms) if at > 0.7]
    assert sum(windows) >= 0.9 * len(windows)


# As loud as the agent's output, and 3 dB below it: louder than its -10 dB echo (about 0.045 here).
# A user no louder than the echo is taken for it, at times (0.05: 17 of 28 windows).
@pytest.mark.parametrize("level", [0.1, 0.07])
def test_a_user_speaking_over_the_echo_is_not_explained(level):
    results = replay(-10.0, 150.0, voice(7, 1.0, level), user_at_s=1.5)
    before = [explained for at, explained in results if 0.9 < at < 1.5]
    during = [explained for at, explained in results if 1.6 <= at < 2.5]
    assert sum(before) >= 0.9 * len(before)
    # Within 100 ms of the user's first syllable the windows are theirs, and stay so.
    assert sum(during) <= 0.2 * len(during)


# The user two to three times as loud as the echo, and quieter than the agent: each window's own fit of the echo's
# gain, the user's voice in it, stays under MAX_GAIN.
@pytest.mark.parametrize(
    ("gain_db", "level", "seed"), [(-14.0, 0.05, 7), (-18.0, 0.07, 11), (-18.0, 0.05, 7), (-22.0, 0.03, 11)]
)
def test_a_user_over_a_settled_echo_louder_than_it_came_back_before_is_not_explained(gain_db, level, seed):
    results = replay(gain_db, 150.0, voice(seed, 1.0, level), user_at_s=1.5)
    before = _between(results, 0.9, 1.5)
    assert sum(before) >= 0.9 * len(before)
    # Past the user's first syllable's rise, none of their windows: taken for echo, they break a turn in pieces.
    assert not any(_between(results, 1.6, 2.5))


def test_input_explained_well_past_the_paths_gain_does_not_raise_it():
    # Windows under GAIN_JUMP are explained, and a user's voice keeps some there for 300 ms and more ("Actually,"
    # over a -13 dB echo): kept in the path's running gain, they raised it until the user's next syllables, louder
    # still, passed as echo. Here the input grows to 1.7 times the echo for 600 ms, then to 2.6 times.
    agent = voice(1, 3.5)
    mic = 1e-4 * np.random.default_rng(9).standard_normal(len(agent) + RATE).astype(np.float32)
    mic[: len(agent)] += _through(-14.0, 150.0, agent)
    mic[int(1.5 * RATE) : int(2.1 * RATE)] *= 1.7
    mic[int(2.1 * RATE) : int(3.0 * RATE)] *= 2.6
    results = _listen(agent, mic)
    before = _between(results, 0.9, 1.5)
    assert sum(before) >= 0.9 * len(before)
    assert not any(_between(results, 2.6, 3.0))


def test_a_user_alone_while_the_agent_talks_is_not_explained():
    # No echo path (a headset): every window the user speaks in is theirs, at the agent's level.
    for seed in (7, 8, 11):
        results = replay(-10.0, 150.0, voice(seed, 1.0, 0.1), user_at_s=1.5, echo=False)
        assert not any(explained for at, explained in results if 1.6 <= at < 2.5)
        # 6 dB quieter, syllables of one synthetic voice line up with another's at some lag now and then.
        results = replay(-10.0, 150.0, voice(seed, 1.0, 0.05), user_at_s=1.5, echo=False)
        during = [explained for at, explained in results if 1.6 <= at < 2.5]
        assert sum(during) <= 0.4 * len(during)


@pytest.mark.parametrize("delay_ms", [50.0, 150.0, 250.0])
def test_the_echo_of_an_answers_start_is_explained_with_the_users_last_words_just_before(delay_ms):
    # The user's question ends, and the answer begins 200 ms later: the first windows of its echo hold the
    # user's last syllables too, which the output before the answer cannot explain.
    agent = np.concatenate([np.zeros(RATE, np.float32), voice(1, 2.0)])
    mic = 1e-4 * np.random.default_rng(9).standard_normal(len(agent)).astype(np.float32)
    mic += _through(-10.0, delay_ms, agent)
    mic[: int(0.8 * RATE)] += voice(7, 0.8, level=0.3)
    echo_from = 1.0 + delay_ms / 1000
    results = _listen(agent, mic)
    first = _between(results, echo_from, echo_from + 0.2)  # the windows of the echo's first 200 ms
    assert first and all(first)


@pytest.mark.parametrize("delay_ms", [50.0, 240.0])
def test_an_answers_echo_path_is_settled_only_once_enough_of_it_came_back_at_that_lag(delay_ms):
    # A -25 dB echo 237 ms late settled at 410 ms on the 50 ms of the answer that had come back at that lag
    # (the echo rig), and the echo's next syllables, unexplained there, cleared the agent.
    agent = np.concatenate([np.zeros(RATE, np.float32), voice(1, 2.0)])
    mic = 1e-4 * np.random.default_rng(9).standard_normal(len(agent)).astype(np.float32)
    mic += _through(-18.0, delay_ms, agent)
    reference = EchoReference(origin=0.0)
    settled: list[tuple[float, int | None]] = []
    for sent in range(0, len(agent), FRAME):
        if agent[sent : sent + FRAME].any():
            reference.played(agent[sent : sent + FRAME], RATE, sent / RATE)
        end = sent + FRAME
        if end % CHECK < FRAME and end >= INPUT_SAMPLES:
            reference.explains(mic[end - INPUT_SAMPLES : end], end / RATE)
            if reference._settled:
                settled.append((end / RATE, reference._lag))
    at, lag = settled[0]
    assert at >= 1.0 + delay_ms / 1000 + SETTLE_BLOCKS * BLOCK / RATE
    assert lag is not None and abs(lag * BLOCK / RATE - delay_ms / 1000) <= 0.03


@pytest.mark.parametrize("gain_db", [-10.0, -25.0])
def test_input_with_the_echo_in_it_is_not_silent_under_the_output(gain_db):
    agent = voice(1, 2.0)
    reference = EchoReference(origin=0.0)
    reference.played(agent, RATE, 0.0)
    echo = _through(gain_db, 150.0, agent)
    hiss = 1e-4 * np.random.default_rng(9).standard_normal(2 * RATE).astype(np.float32)
    assert not reference.silent_under((echo + hiss)[RATE - QUIET_INPUT_SAMPLES : RATE], 1.0)
    assert reference.silent_under(hiss[RATE - QUIET_INPUT_SAMPLES : RATE], 1.0)


def test_silence_tells_nothing_before_the_output_had_time_to_come_back():
    reference = EchoReference(origin=0.0)
    hiss = 1e-4 * np.random.default_rng(9).standard_normal(RATE).astype(np.float32)
    assert not reference.silent_under(hiss[-QUIET_INPUT_SAMPLES:], 1.0)  # nothing played
    reference.played(voice(1, 2.0), RATE, 0.6)
    assert not reference.silent_under(hiss[-QUIET_INPUT_SAMPLES:], 1.0)  # its echo may yet come


def test_output_played_through_the_input_looked_at_only_within_one_stretch():
    reference = EchoReference(origin=0.0)
    reference.played(voice(1, 2.0), RATE, 1.0)  # plays from 1 s to 3 s
    window_s = QUIET_INPUT_SAMPLES / RATE
    assert reference.played_through(QUIET_INPUT_SAMPLES, 1.0 + window_s)
    assert not reference.played_through(QUIET_INPUT_SAMPLES, 0.9 + window_s)  # from before it began
    assert reference.played_through(QUIET_INPUT_SAMPLES, 3.0 + MAX_LAG_S)  # the input its end comes back in
    assert not reference.played_through(QUIET_INPUT_SAMPLES, 3.1 + MAX_LAG_S)  # past its end: no echo due
    reference.played(voice(2, 1.0), RATE, 4.0)  # a new stretch
    assert not reference.played_through(QUIET_INPUT_SAMPLES, 4.5)
    assert reference.played_through(QUIET_INPUT_SAMPLES, 4.0 + window_s)


def test_a_voice_in_time_with_the_output_off_the_echos_path_is_not_echo():
    # Once the output came back 150 ms late, a sound that follows it 30 ms late (another voice keeping in time
    # with it by chance, about as loud as the output) is not its echo, for a second (REPATH_S): a voice
    # correlated by chance for 450 ms at most.
    agent = voice(1, 3.0)
    mic = _through(-10.0, 150.0, agent)
    other = 0.5 * np.concatenate([np.zeros(480, np.float32), agent])[: len(agent)]
    mic[int(1.5 * RATE) :] = other[int(1.5 * RATE) :]
    results = _listen(agent, mic)
    before = _between(results, 0.7, 1.5)
    assert sum(before) >= 0.9 * len(before)
    assert not any(_between(results, 2.0, 2.5))


def test_a_path_found_on_a_voice_gives_way_to_the_echos_own():
    # A sound in time with the output 30 ms late settles the stretch's path first; the echo then comes back
    # 150 ms late for seconds: the path moves to it.
    agent = voice(1, 5.0)
    mic = _through(-10.0, 150.0, agent)
    other = 0.5 * np.concatenate([np.zeros(480, np.float32), agent])[: len(agent)]
    mic[: int(1.0 * RATE)] = other[: int(1.0 * RATE)]
    results = _listen(agent, mic)
    assert sum(_between(results, 0.5, 1.0)) >= 5  # the voice, taken for the echo
    late = _between(results, 3.0, 5.0)
    assert sum(late) >= 0.9 * len(late)


def test_output_after_a_pause_may_come_back_another_way():
    agent = voice(1, 4.0)
    half = 2 * RATE
    playing = np.concatenate([agent[:half], np.zeros(RATE, np.float32), agent[half:]])
    # The first stretch comes back 200 ms late; the second, a second later, 50 ms late (another room).
    mic = np.concatenate([_through(-12.0, 200.0, playing[:half]), _through(-12.0, 50.0, playing)[half:]])
    results = _listen(playing, mic)
    before, after = _between(results, 0.7, 2.0), _between(results, 3.7, 5.0)
    assert sum(before) >= 0.9 * len(before) and sum(after) >= 0.9 * len(after)


def test_nothing_played_explains_nothing():
    reference = EchoReference(origin=0.0)
    assert not reference.explains(voice(3, 1.0)[-INPUT_SAMPLES:], 1.0)
    reference.played(voice(1, 0.5), RATE, 0.0)
    # Long after the output ended (past the longest way back), speech is the user's.
    assert not reference.explains(voice(3, 1.0)[-INPUT_SAMPLES:], 3.0)


def test_a_clear_drops_what_the_client_had_not_played():
    reference = EchoReference(origin=0.0)
    agent = voice(1, 2.0)
    reference.played(agent, RATE, 0.0)  # sent at once: it plays until 2.0 s
    reference.cleared(0.8)
    echo = _through(-10.0, 100.0, agent)
    assert reference.explains(echo[int(0.75 * RATE) - INPUT_SAMPLES : int(0.75 * RATE)], 0.75)
    # What would have played after the clear is not a reference: the same audio at 1.5 s is not echo.
    assert not reference.explains(echo[int(1.5 * RATE) - INPUT_SAMPLES : int(1.5 * RATE)], 1.5)


def test_other_output_rates_are_brought_to_the_pipeline_rate():
    from voice_agent.audio import resample

    agent = voice(1, 2.0)
    reference = EchoReference(origin=0.0)
    at_8k = resample(agent, RATE, 8000)
    for sent in range(0, len(at_8k), 160):
        reference.played(at_8k[sent : sent + 160], 8000, sent / 8000)
    echo = _through(-12.0, 120.0, agent)
    assert reference.explains(echo[RATE - INPUT_SAMPLES : RATE], 1.0)


def test_a_check_costs_well_under_a_millisecond():
    agent = voice(1, 2.0)
    reference = EchoReference(origin=0.0)
    reference.played(agent, RATE, 0.0)
    heard = (0.3 * agent[RATE - INPUT_SAMPLES : RATE]).copy()
    started = time.perf_counter()
    for _ in range(200):
        reference.explains(heard, 1.1)
    per_check_ms = (time.perf_counter() - started) / 200 * 1000
    assert per_check_ms < 1.0  # measured about 0.1 ms on the shared 2-core machine


# The session: the agent's output comes back through a room into its input.


class VoiceTTS:
    """Speech-like audio, 300 ms a word, loud enough that its echo passes the test VAD: each chunk its own
    syllables, as speech is (an output that repeats itself every chunk has an echo path at every repeat)."""

    sample_rate = RATE

    async def synthesize(self, text):
        await asyncio.sleep(0.005)
        yield voice(zlib.crc32(text.encode()), len(text.split()) * 0.3, level=0.6)

    async def warm_up(self):
        pass

    async def close(self):
        pass


class Loudspeaker:
    """The client's loudspeaker in a room (the rig's model of one) and its microphone: it plays what the session
    sends, and the microphone hears its echo, with the user's voice where there is one."""

    def __init__(self, h):
        self.h = h
        self.room = Echo(RATE, origin=time.monotonic())
        self.seen = len(h.events)
        # The microphone records without a gap, as a real one does, and a frame is sent once its last sample is
        # recorded, back to back with the next where the test ran late. The session dates its input by the least
        # delayed frame of the last seconds: frames sent on a timer that runs late, or the test's faster ones,
        # skew that date until they are past, and the echo's path seems to move.
        self.recorded = time.monotonic()
        self.echo = True  # whether the microphone hears the loudspeaker (not through a headset)

    async def talk_over(self, seconds: float, user: np.ndarray | None = None, until=lambda: False) -> None:
        """``seconds`` of microphone frames: the echo of what the session sent, plus ``user``; ``until`` ends them
        early."""
        h = self.h
        for start in range(0, int(seconds * RATE), FRAME):
            if until():
                return
            self.recorded += FRAME / RATE
            await asyncio.sleep(max(0.0, self.recorded - time.monotonic()))
            now = time.monotonic()
            for event in h.events[self.seen :]:
                if isinstance(event, AgentAudio):
                    self.room.played(now, event.samples)
                elif isinstance(event, Clear):
                    self.room.cleared(now)
            self.seen = len(h.events)
            mic = self.room.capture(self.recorded, FRAME) * float(self.echo)
            if user is not None and start < len(user):
                mic[: len(user[start : start + FRAME])] += user[start : start + FRAME]
            h.session.handle(AudioReceived(mic))


async def answering(monkeypatch, echo_comes_back: bool = True, **settings) -> tuple[Harness, Loudspeaker]:
    from voice_agent.replay import echo

    # A loud speakerphone: 8 dB down (the rig's loudest is 10), 120 ms late.
    monkeypatch.setattr(echo, "draw_path", lambda rng, room: EchoPath(-8.0, 120.0, seed=3, room=room))
    h = Harness(answer=" ".join(f"word{i}." for i in range(40)), **{"barge_in_force_ms": 600, **settings})
    h.session.engines.tts = VoiceTTS()
    loudspeaker = Loudspeaker(h)
    loudspeaker.echo = echo_comes_back
    await loudspeaker.talk_over(0.5, user=tone(0.5))
    await loudspeaker.talk_over(5.0, until=lambda: h.of(AgentAudio))
    h.stt.text = "Foxtrot golf hotel."  # what Whisper would make of the echo: not acknowledgement words
    return h, loudspeaker


def timed_pauses(monkeypatch) -> list[float]:
    """How long each pause of a reply lasted, in seconds, as it resumes."""
    lasted: list[float] = []
    since: dict[int, float] = {}

    def timed(name, reply):
        if name == "pause":
            since.setdefault(id(reply), time.monotonic())
        elif id(reply) in since:
            lasted.append(time.monotonic() - since.pop(id(reply)))

    watch_pauses(monkeypatch, timed)
    return lasted


@pytest.mark.wallclock
async def test_the_echo_alone_does_not_stop_the_agent_or_leave_a_gap(monkeypatch):
    lasted = timed_pauses(monkeypatch)
    h, loudspeaker = await answering(monkeypatch)
    sent = len(h.of(AgentAudio))
    await loudspeaker.talk_over(2.0)
    assert h.of(Clear) == []
    # A pause at a speech window the echo test did not explain ends within the output lead the client still
    # plays (its timer ends it then at the latest; a busy loop runs it a little late): the user hears no gap.
    assert all(seconds < h.settings.output_lead_ms / 1000 + 0.03 for seconds in lasted), lasted
    assert len(h.of(AgentAudio)) > sent  # it went on talking
    await h.session.close()


@pytest.mark.wallclock
async def test_without_the_echo_test_the_same_echo_stops_the_agent(monkeypatch):
    h, loudspeaker = await answering(monkeypatch, barge_in_ignore_echo=0)
    await loudspeaker.talk_over(2.0)
    assert h.of(Clear)
    await h.session.close()


@pytest.mark.wallclock
async def test_the_user_speaking_over_the_echo_stops_the_agent(monkeypatch):
    h, loudspeaker = await answering(monkeypatch)
    await loudspeaker.talk_over(0.6)
    h.stt.text = "Stop, I want something else."
    await loudspeaker.talk_over(1.0, user=voice(5, 1.0, level=0.6))
    # A stop word over the echo is read twice before the agent clears (it is paused meanwhile): the second
    # reading comes with more speech, or with the whole turn once it ends, where the suppressor took too much of
    # this synthetic voice, at the pitch of the agent's, for its echo (1 run in 6).
    await loudspeaker.talk_over(1.0, until=lambda: h.of(Clear))
    assert h.of(Clear)
    await h.session.close()


@pytest.mark.wallclock
async def test_the_user_over_the_echo_silences_the_agent_before_their_speech_makes_a_turn(monkeypatch):
    h, loudspeaker = await answering(monkeypatch)
    turns_at_pause = []

    def recorded(name, reply):
        if name == "pause":
            turns_at_pause.append(h.session.listener.turn)

    watch_pauses(monkeypatch, recorded)
    await loudspeaker.talk_over(0.6)
    assert turns_at_pause == []
    h.stt.text = "Stop, I want something else."
    await loudspeaker.talk_over(1.0, user=voice(5, 1.0, level=0.6))
    # A stop word over the echo is read twice before the agent clears (it is paused meanwhile): the second
    # reading comes with more speech, or with the whole turn once it ends, where the suppressor took too much of
    # this synthetic voice, at the pitch of the agent's, for its echo (1 run in 6).
    await loudspeaker.talk_over(1.0, until=lambda: h.of(Clear))
    assert h.of(Clear)
    assert turns_at_pause[0] is None  # at its onset, as without an echo: the echo test comes after
    await h.session.close()


async def answering_without_echo(monkeypatch, seconds: float) -> tuple[Harness, Loudspeaker]:
    """An answer whose echo does not come back, ``seconds`` into it. The user's turns must outlast the output's
    gaps between words: a user's turn, unlike an echo's, goes on through them."""
    waits = {f"end_silence{kind}_ms": 800 for kind in ("", "_complete", "_telling", "_incomplete")}
    h, loudspeaker = await answering(monkeypatch, echo_comes_back=False, **waits)
    await loudspeaker.talk_over(seconds)
    return h, loudspeaker


@pytest.mark.wallclock
@pytest.mark.parametrize("quiet_s", [0.8, 1.5])  # before, then once, the call is known free of echo
async def test_a_voice_that_began_over_silence_under_the_agent_is_never_taken_for_its_echo(monkeypatch, quiet_s):
    # A voice correlates with the agent's output at one lag or another by chance: at 0.91, a path found 270 ms
    # into "Stop, please wait a moment." (over a client that sent silence) took its "Stop" for echo. The surest
    # such voice is in time with the output all through: here, its echo, heard from the moment the user speaks.
    h, loudspeaker = await answering_without_echo(monkeypatch, quiet_s)
    h.stt.text = "Stop, please wait a moment."
    loudspeaker.echo = True
    await loudspeaker.talk_over(1.0, until=lambda: h.of(Clear))
    assert h.of(Clear)
    loudspeaker.echo = False
    await loudspeaker.talk_over(2.0, until=lambda: h.session.listener.turn is None)
    await loudspeaker.talk_over(0.5)
    # Its words are the transcript's: no echo is taken out of them.
    question, *heard = [t.text for t in h.of(Transcript) if t.role == "user" and t.final]
    assert heard == ["Stop, please wait a moment."]
    await h.session.close()


@pytest.mark.wallclock
async def test_a_call_whose_input_was_silent_under_the_agent_hears_speech_as_an_answer_begins(monkeypatch):
    # Speech that begins as an answer does (a user going on after a pause) comes before enough of the answer has
    # played to tell it from the answer's echo, and its onset correlates with the answer's own at some lag: with
    # no echo at all, the echo test took such speech for echo. A call whose input was near silence under the
    # agent's voice before has none. The surest such speech keeps time with the answer: here, a recording of
    # the same answer as it played before, from 300 ms into it.
    h, loudspeaker = await answering_without_echo(monkeypatch, 1.5)
    answer = np.concatenate([e.samples for e in h.of(AgentAudio)]) * 0.5
    h.stt.text = "Stop. What about tomorrow?"
    await loudspeaker.talk_over(1.0, user=voice(5, 0.8, level=0.6), until=lambda: h.of(Clear))
    assert h.of(Clear)
    seen = len(h.events)
    await loudspeaker.talk_over(3.0, until=lambda: any(isinstance(e, AgentAudio) for e in h.events[seen:]))
    await loudspeaker.talk_over(0.3)
    await loudspeaker.talk_over(0.6, user=answer)
    turn = h.session.listener.turn
    assert turn is not None and turn.speech_ms >= 400  # the user's: the answer gave way to it at once
    await h.session.close()


class EchoReadingSTT(ReadsAsSpeech):
    """Whisper's way with an echo: a "yeah" alone reads "Yeah."; with the agent's echo under it, the echo's
    words come too ("Okay now." for the agent's "... right now"). The first 200 ms of the check's audio are
    its pre-roll, before the user's sound: the echo, if it is still in."""

    def __init__(self):
        self.heard: list[np.ndarray] = []

    async def transcribe(self, audio):
        self.heard.append(audio)
        await asyncio.sleep(0.01)
        before = audio[: RATE // 5]
        return "Okay now. Yeah." if np.sqrt(np.mean(before**2)) > 0.01 else "Yeah."


@pytest.mark.wallclock
async def test_an_acknowledgement_over_the_echo_is_heard_without_the_echo(monkeypatch):
    calls = record_pauses(monkeypatch)
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)  # the words decide on a "yeah"
    h.session.engines.stt = stt = EchoReadingSTT()
    await loudspeaker.talk_over(1.2)  # the echo alone, which the path is found on
    await loudspeaker.talk_over(1.0, user=voice(5, 0.4, level=0.6))
    assert stt.heard  # the words were checked
    # The echo alone again: the turn lasts while the agent's voice comes back into it.
    await loudspeaker.talk_over(4.0, until=lambda: h.session.listener.turn is None)
    assert h.session.listener.turn is None
    assert h.of(Clear) == []
    assert calls[-1:] in ([], ["resume"])  # it paused while the words were checked, at most
    await h.session.close()


@pytest.mark.wallclock
async def test_one_word_over_the_echo_waits_for_more_speech(monkeypatch):
    # "Out" is what Whisper read into an "uh-huh" over the echo (scripts/bargein_eval).
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = stt = ScriptedSTT("Out")
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.0, user=voice(5, 0.4, level=0.6))
    assert stt.calls
    await loudspeaker.talk_over(1.0)
    assert h.of(Clear) == []
    await h.session.close()


class OwnWordSTT(ReadsAsSpeech):
    """What is left of the agent's echo once it is taken out, read as the word the agent is saying (its "you",
    in scripts/bargein_eval's echo rig)."""

    def __init__(self, h):
        self.h = h
        self.calls = 0

    async def transcribe(self, audio):
        self.calls += 1
        await asyncio.sleep(0.01)
        reply = self.h.session.reply
        return [chunk.text for chunk in reply.chunks if chunk.start_s <= reply.heard_s()][-1]


class MostlyOwnWordsSTT(OwnWordSTT):
    """The echo's residue under a noise, read as the agent's last two words and one of Whisper's own ("Take the
    plane." for a door slam over "You can take the", in scripts/bargein_eval's echo rig)."""

    async def transcribe(self, audio):
        self.calls += 1
        await asyncio.sleep(0.01)
        reply = self.h.session.reply
        said = [chunk.text.rstrip(".") for chunk in reply.chunks if chunk.start_s <= reply.heard_s()]
        return " ".join(said[-2:]) + " plane."


@pytest.mark.wallclock
async def test_a_noise_read_as_mostly_its_own_words_over_the_echo_does_not_stop_the_agent(monkeypatch):
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = stt = MostlyOwnWordsSTT(h)
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.5, user=voice(5, 0.9, level=0.6))
    await loudspeaker.talk_over(1.0)
    assert stt.calls
    assert h.of(Clear) == []
    assert not h.session.reply.paused
    await h.session.close()


@pytest.mark.wallclock
@pytest.mark.parametrize("no_speech", [False, True], ids=["read as speech", "judged no speech"])
async def test_a_word_of_its_own_left_over_the_echo_does_not_hold_the_agent(monkeypatch, no_speech):
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = stt = OwnWordSTT(h)
    stt.no_speech = no_speech  # Whisper unsure of the residue: the agent's own words are its echo all the same
    resumes = []  # at each resume after a check: whether the turn still went on

    def recorded(name, reply):
        if name == "resume" and stt.calls:
            resumes.append(h.session.listener.turn is not None)

    watch_pauses(monkeypatch, recorded)
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.0, user=voice(5, 0.4, level=0.6))
    assert stt.calls
    assert resumes[:1] == [True]  # at the check's reading, not once the turn ended
    assert h.of(Clear) == []
    await h.session.close()


@pytest.mark.wallclock
async def test_a_noise_whisper_reads_as_words_but_judges_no_speech_over_the_echo_does_not_stop_the_agent(monkeypatch):
    # Whisper's reading of a long hiss over the echo rig, once the echo was out: it cleared the agent.
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=5000)  # the words decide
    h.session.engines.stt = stt = ScriptedSTT("I'm gonna be a good one.")
    stt.no_speech = True
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.5, user=voice(5, 1.2, level=0.6))
    await loudspeaker.talk_over(1.0)
    assert stt.calls >= 2  # read as it went on, and whole
    assert h.of(Clear) == []
    assert not h.session.reply.paused
    await h.session.close()


@pytest.mark.wallclock
async def test_a_user_who_goes_on_after_one_word_over_the_echo_stops_the_agent(monkeypatch):
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = ScriptedSTT("Out", "Out of the fish, I want the soup.")
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.5, user=voice(5, 1.2, level=0.6))
    assert h.of(Clear)
    await h.session.close()


class TurnEndReadingSTT(ReadsAsSpeech):
    """Reads speech as ``during`` while a user turn goes on, and as ``after`` once it has ended."""

    def __init__(self, listener, during: str, after: str):
        self.listener, self.during, self.after = listener, during, after
        self.calls = 0

    async def transcribe(self, audio):
        self.calls += 1
        text = self.during if self.listener.turn is not None else self.after
        await asyncio.sleep(0.01)
        return text


@pytest.mark.wallclock
async def test_words_that_stop_no_one_over_the_echo_wait_for_the_whole_turn(monkeypatch):
    # The echo rig's "Mm-hmm." read as "in the thumb." by the check: the whole turn reads it for what it is.
    calls = record_pauses(monkeypatch)
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = stt = TurnEndReadingSTT(h.session.listener, "in the thumb.", "Mm-hmm.")
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.0, user=voice(5, 0.4, level=0.6))
    await loudspeaker.talk_over(1.0)
    assert stt.calls >= 2  # the check, then the whole turn
    assert h.of(Clear) == []
    assert calls[-1:] == ["resume"]  # paused while it listened, and talking again
    await h.session.close()


@pytest.mark.wallclock
@pytest.mark.parametrize(
    "during, whole",
    [
        ("It's fine.", "It's fine."),  # a door slam over the echo rig: short words that stop no one
        ("What?", "Okay."),  # knocks: a stop word read once, then the whole turn for what it is
    ],
)
async def test_a_noise_read_as_words_over_the_echo_does_not_stop_the_agent(monkeypatch, during, whole):
    # Whisper's readings of noises over the echo rig, before and after their turn ended.
    calls = record_pauses(monkeypatch)
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=900)
    h.session.engines.stt = stt = TurnEndReadingSTT(h.session.listener, during, whole)
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.0, user=voice(5, 0.3, level=0.6))
    await loudspeaker.talk_over(4.0, until=lambda: h.session.listener.turn is None and stt.calls >= 2)
    await loudspeaker.talk_over(0.3)  # the whole turn's check, then the agent's voice again
    assert stt.calls >= 2  # the check, then the whole turn
    assert h.of(Clear) == []
    assert "resume" in calls[calls.index("pause") :]
    await h.session.close()


@pytest.mark.wallclock
async def test_a_stop_word_read_twice_over_the_echo_stops_the_agent_while_the_user_speaks(monkeypatch):
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=2000)  # no forced stop
    h.session.engines.stt = stt = ScriptedSTT("Wait.", "Wait, I have a question.")
    await loudspeaker.talk_over(1.2)
    await loudspeaker.talk_over(1.5, user=voice(5, 1.2, level=0.6), until=lambda: bool(h.of(Clear)))
    assert h.of(Clear) and stt.calls >= 2
    assert h.session.listener.turn is not None  # before the turn ended
    await h.session.close()


@pytest.mark.wallclock
async def test_an_interruption_without_a_stop_word_over_the_echo_stops_the_agent_once_the_turn_ends(monkeypatch):
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=2000)  # no forced stop
    h.session.engines.stt = ScriptedSTT("I would rather have the soup.")
    await loudspeaker.talk_over(1.2)
    # About 600 ms of it is speech to the VAD once the echo is out: words, not a noise read as words.
    await loudspeaker.talk_over(1.5, user=voice(5, 1.0, level=0.6))
    await loudspeaker.talk_over(1.0)
    assert h.of(Clear)
    await h.session.close()


@pytest.mark.wallclock
async def test_a_turn_that_began_over_the_echo_is_transcribed_without_it(monkeypatch):
    # Committed once the answer ended, such a turn was answered as words garbled from the echo.
    h, loudspeaker = await answering(monkeypatch, barge_in_force_ms=100_000)
    h.session.engines.stt = EchoReadingSTT()
    await loudspeaker.talk_over(1.2)
    timeline = h.session.listener.timeline

    def turn_of_the_last(seconds: float, over_agent: bool = True) -> UserTurn:
        end = timeline.received - SPEECH_TAIL_SAMPLES
        start = end - int(seconds * RATE)
        return UserTurn(7, start, end, speech_ms=seconds * 1000, over_agent=over_agent, timeline=timeline, stt=h.stt)

    interruptions = h.session.interruptions
    assert await interruptions.words_without_echo(turn_of_the_last(0.8), "Okay now.") == ""  # the echo alone
    await loudspeaker.talk_over(0.5, user=voice(5, 0.4, level=0.6))
    # From 0.4 s of the echo alone before the user's sound: EchoReadingSTT reads it as "Okay now."
    assert await interruptions.words_without_echo(turn_of_the_last(0.9), "Okay now. Yeah.") == "Yeah."
    # A turn that interrupted the agent began over it all the same: its answer is to the user's words alone.
    interrupted = turn_of_the_last(0.9)
    interrupted.over_agent = False
    assert await interruptions.words_without_echo(interrupted, "Okay now. Yeah.") == "Yeah."
    not_over = turn_of_the_last(0.9, over_agent=False)
    assert await interruptions.words_without_echo(not_over, "Okay now. Yeah.") == "Okay now. Yeah."
    await h.session.close()
