"""The listener: audio in, user turns out, asking a turn taker who has the floor."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.test_session import EnergyVAD, quiet, tone
from voice_agent.config import Settings
from voice_agent.engines.stt_queue import STTQueue
from voice_agent.engines.vad import PREROLL_SAMPLES, WINDOW
from voice_agent.protocols.events import Transcript
from voice_agent.turn_taking.listener import IDLE_KEEP_SAMPLES, Listener

RATE = 16000


class WordsSTT:
    async def transcribe(self, audio):
        await asyncio.sleep(0)
        return "Hello there."

    async def warm_up(self):
        pass

    async def close(self):
        pass


class Floor:
    """A turn taker that records what it is asked."""

    def __init__(self, kept=None, own_voice=False, agent_holds_floor=False):
        self.calls: list[tuple] = []
        self.kept = kept
        self.own_voice = own_voice
        self.agent_holds_floor = agent_holds_floor
        self.asked: list[tuple[int, int]] = []  # hears_own_voice's (start, end)

    def begin_turn(self, start):
        self.calls.append(("begin", start))
        return start, False

    def user_speaks(self, turn):
        pass

    def user_partial(self, turn, transcript):
        pass

    def speech_begins(self, start):
        pass

    def speech_faded(self):
        pass

    def user_pauses(self, turn, transcript, stt_ms):
        self.calls.append(("pause", transcript))

    def commit(self, turn):
        self.calls.append(("commit", turn.id))
        self.listener.turn = None

    def kept_start(self):
        return self.kept

    def hears_own_voice(self, start, end):
        self.asked.append((start, end))
        return self.own_voice

    def holds_floor(self, turn):
        return self.agent_holds_floor


class TellingSTT(WordsSTT):
    async def transcribe(self, audio):
        await asyncio.sleep(0)
        return "I was there."


def listener(floor: Floor, stt=WordsSTT, **settings) -> tuple[Listener, list]:
    events: list = []
    defaults = dict(
        end_silence_complete_ms=200,
        end_silence_telling_ms=200,
        end_silence_ms=200,
        stt_speculative_silence_ms=64,
        turn_decision="rules",  # the listener's mechanics, at silences set here
    )
    session_stt = STTQueue(stt).session()
    made = Listener(Settings(**{**defaults, **settings}), EnergyVAD(), lambda: session_stt, events.append, floor, floor)
    floor.listener = made
    return made, events


async def feed(made: Listener, audio: np.ndarray) -> None:
    for start in range(0, len(audio), 320):
        made.feed(audio[start : start + 320])
        await asyncio.sleep(0)


async def test_speech_makes_a_turn_with_pre_roll_that_a_pause_commits():
    floor = Floor()
    made, events = listener(floor)
    await feed(made, quiet(1.0))
    await feed(made, tone(0.6))
    [(kind, start)] = floor.calls
    # Some audio from before the speech began (the VAD fires late), at most the pre-roll before it.
    assert kind == "begin" and RATE - PREROLL_SAMPLES - WINDOW <= start < RATE - WINDOW
    assert made.turn is not None and made.turn.start == start
    await feed(made, quiet(0.4))
    assert ("pause", "Hello there.") in floor.calls and floor.calls[-1] == ("commit", 1)
    assert made.turn is None
    partials = [e for e in events if isinstance(e, Transcript)]
    assert partials and all(e.text == "Hello there." and not e.final for e in partials)  # every 500 ms of speech
    await made.close()


class HeldSTT(WordsSTT):
    """Transcribes once the test releases it."""

    def __init__(self):
        self.release = asyncio.Event()

    async def transcribe(self, audio):
        await self.release.wait()
        return "Hello there."


async def test_a_transcript_that_comes_in_between_two_windows_is_acted_on_at_once():
    floor = Floor()
    stt = HeldSTT()
    made, _ = listener(floor, stt=lambda: stt)
    await feed(made, quiet(0.5))
    await feed(made, tone(0.6))
    await feed(made, quiet(0.3))  # the required silence, while Whisper has not answered
    assert [call[0] for call in floor.calls] == ["begin"]
    stt.release.set()
    for _ in range(5):  # no more audio: no VAD window
        await asyncio.sleep(0)
    assert floor.calls[1:] == [("pause", "Hello there."), ("commit", 1)]
    await made.close()


class TrailingSTT(WordsSTT):
    async def transcribe(self, audio):
        await asyncio.sleep(0)
        return "And then..."


@pytest.mark.parametrize("agent_holds_floor", [False, True])
async def test_speech_over_the_agent_ends_on_a_short_silence_whatever_its_words(agent_holds_floor):
    floor = Floor(agent_holds_floor=agent_holds_floor)
    made, _ = listener(floor, stt=TrailingSTT, end_silence_incomplete_ms=2000)
    await feed(made, quiet(0.5))
    await feed(made, tone(0.6))
    await feed(made, quiet(0.5))  # the complete-sentence silence (200 ms) and more; not an unfinished one's
    committed = ("commit", 1) in floor.calls
    assert committed == agent_holds_floor
    await made.close()


async def test_audio_is_kept_for_a_turn_that_may_merge_and_trimmed_otherwise():
    floor = Floor(kept=RATE // 2)
    made, _ = listener(floor, max_turn_s=1.0)
    await feed(made, quiet(3.0))
    assert made.timeline.start == RATE // 2  # the committed turn's audio, while nobody heard its answer
    floor.kept = None
    await feed(made, quiet(0.1))
    assert made.timeline.start == made.timeline.received - IDLE_KEEP_SAMPLES  # only the pre-roll and echo test
    await made.close()


async def test_a_short_blip_is_not_a_turn():
    floor = Floor()
    made, _ = listener(floor, vad_min_speech_ms=96)
    await feed(made, np.concatenate([quiet(0.5), tone(0.04), quiet(0.5)]))  # two 32 ms windows, under 96 ms
    assert floor.calls == []
    await feed(made, np.concatenate([tone(0.1), quiet(0.5)]))  # four windows: a turn
    assert floor.calls[0][0] == "begin"
    await made.close()


async def test_speech_that_is_the_agents_own_voice_makes_no_turn():
    floor = Floor(own_voice=True)
    made, _ = listener(floor)
    await feed(made, quiet(0.5))
    await feed(made, tone(0.6))
    assert floor.calls == [] and made.turn is None
    echo_end = made.timeline.received
    # The user speaks: a turn as ever, its pre-roll reaching back over windows taken for echo,
    # since the echo test also takes the onset of a user's "Stop" for echo.
    floor.own_voice = False
    await feed(made, tone(0.3))
    [(kind, start)] = floor.calls
    assert kind == "begin" and start < echo_end - WINDOW


async def test_the_echo_test_is_told_where_the_speech_began_its_run_then_its_turn():
    floor = Floor()
    made, _ = listener(floor)
    await feed(made, quiet(0.5))
    onset = made.timeline.received
    await feed(made, tone(0.3))
    starts = [start for start, _ in floor.asked]
    run_start = starts[0]
    assert abs(run_start - onset) < WINDOW  # the run's first window, whichever of the two the onset falls in
    (kind, turn_start), *_ = floor.calls
    assert kind == "begin" and turn_start == run_start - PREROLL_SAMPLES
    assert made.turn is not None and made.turn.speech_start == run_start
    # The windows of the run until it makes a turn (96 ms: three), then each window of the turn.
    assert starts == [run_start] * 3 + [turn_start] * (len(starts) - 3), starts
    await made.close()


async def test_a_pause_after_a_finished_sentence_that_the_user_goes_on_from_is_learned():
    # "I was there." is a finished telling: it waits end_silence_telling_ms unless the user is known to pause longer.
    floor = Floor()
    made, _ = listener(floor, TellingSTT, end_silence_telling_ms=900, end_silence_incomplete_ms=3000)
    await feed(made, np.concatenate([quiet(0.5), tone(0.6), quiet(0.7), tone(0.6)]))  # 700 ms: thinking
    assert not any(kind == "commit" for kind, *_ in floor.calls)
    assert 950 <= made._detector.habit.telling_ms(900) <= 1050  # the pause, ~700 ms in 32 ms windows, + 300
    assert made._detector.habit.longest_within_turns_ms() >= 650  # its questions lose the quick commit too
    # Now a 950 ms pause would have cut the user off before; the learned habit waits it out.
    await feed(made, np.concatenate([quiet(0.95), tone(0.6)]))
    assert not any(kind == "commit" for kind, *_ in floor.calls)
    await feed(made, quiet(1.5))
    assert floor.calls[-1][0] == "commit"
    await made.close()


async def test_a_user_who_talks_into_the_answer_teaches_the_pause_too():
    floor = Floor()
    made, _ = listener(floor, TellingSTT, end_silence_telling_ms=400)
    await feed(made, np.concatenate([quiet(0.5), tone(0.6), quiet(0.6)]))
    assert floor.calls[-1][0] == "commit"
    committed_start = made._last_commit[0]
    floor.begin_turn = lambda start: (committed_start, False)  # the session merges the two turns
    await feed(made, np.concatenate([quiet(0.5), tone(0.3)]))  # back 1.1 s after the first part's last word
    assert 1300 <= made._detector.habit.telling_ms(400) <= 1500
    assert made._detector.habit.longest_within_turns_ms() == 0  # it may be a correction: questions keep theirs
    await made.close()


@pytest.mark.parametrize(("rate", "most_ms"), [(8000, 1), (24000, 40), (48000, 40)])
async def test_input_at_another_rate_reaches_the_pipeline_as_it_comes(rate, most_ms):
    # A phone call's 20 ms frames: each one's audio is in the timeline at once, not in soxr's blocks of
    # about 100 ms, which held a phone caller's speech back from the VAD; downsampled, a frame or two. The
    # resampler's own lag: the echo canceller would hold back up to a 10 ms frame more.
    made, _ = listener(Floor(), echo_cancellation="off")
    made.set_sample_rate(rate)
    frame = rate // 50
    lags = []
    for index in range(1, 26):
        made.feed(np.zeros(frame, np.float32))
        lags.append((index * 320 - made.timeline.received) / 16)  # ms of input not yet in the timeline
    assert max(lags[1:]) <= most_ms, lags
    await made.close()


async def test_a_long_turn_with_short_gaps_goes_on_past_half_a_minute_at_the_defaults():
    # A caller explaining something talks past 30 s; a turn that long is committed at its next gap, so the
    # default limit is well past it.
    floor = Floor()
    made, _ = listener(floor, max_turn_s=Settings().max_turn_s)
    await feed(made, np.concatenate([quiet(0.5)] + [np.concatenate([tone(0.9), quiet(0.1)]) for _ in range(45)]))
    assert "commit" not in [kind for kind, *_ in floor.calls]
    await feed(made, quiet(0.5))
    assert ("commit", 1) in floor.calls
    await made.close()


async def test_a_partial_dropped_for_the_budget_waits_for_more_speech_before_the_next_is_asked():
    class Skips:
        def __init__(self):
            self.kinds: list = []

        def stt_started(self, kind, waited_s):
            pass

        def stt_skipped(self, kind, reason):
            self.kinds.append((kind.value, reason))

    floor = Floor()
    made, events = listener(floor)
    queue = STTQueue(WordsSTT, rate=0.25, burst_s=0.0)  # no budget at hand: every partial is dropped
    skips = Skips()
    queue.watchers.append(skips)
    session_stt = queue.session()
    made._stt = lambda: session_stt
    await feed(made, np.concatenate([quiet(0.5), tone(2.2)]))
    assert not [e for e in events if isinstance(e, Transcript)]
    # One every 500 ms of speech, as when they run; not one a window.
    assert skips.kinds and set(skips.kinds) == {("partial", "over_budget")} and len(skips.kinds) <= 5
