"""A user turn's own work: the speculative final transcript and the answer prepared from it."""

from __future__ import annotations

import asyncio

import numpy as np

from voice_agent.agent.reply_factory import TurnMetrics
from voice_agent.engines.vad import WINDOW, WINDOW_MS
from voice_agent.reply.pipeline import ReplyTimings
from voice_agent.turn_taking.timeline import AudioTimeline
from voice_agent.turn_taking.user_turn import SPEECH_TAIL_SAMPLES, UserTurn


class CountingSTT:
    def __init__(self):
        self.lengths: list[int] = []

    async def transcribe(self, audio):
        self.lengths.append(len(audio))
        await asyncio.sleep(0)
        return f"{len(audio)} samples"


class HeldReply:
    """Stands in for a held Reply: runs until cancelled."""

    async def run(self):
        await asyncio.sleep(10)


def a_turn(stt, **kwargs) -> UserTurn:
    timeline = AudioTimeline(clock=lambda: 0.0)
    timeline.append(np.zeros(16000, np.float32))
    return UserTurn(1, 1000, 1000 + 10 * WINDOW, speech_ms=320, over_agent=False, timeline=timeline, stt=stt, **kwargs)


async def test_the_speculative_transcript_serves_as_the_final_one_while_no_speech_follows():
    stt = CountingSTT()
    turn = a_turn(stt)
    turn.speculate()
    turn.speculate()  # the same audio: not transcribed twice
    assert turn.speculative_transcript() is None  # not in yet
    await asyncio.sleep(0.01)
    text, _ = turn.speculative_transcript()
    assert text == f"{10 * WINDOW + SPEECH_TAIL_SAMPLES} samples"
    metrics = TurnMetrics(1)
    assert await turn.final_transcript(metrics) == text
    assert metrics.stt_speculative and len(stt.lengths) == 1


async def test_more_speech_makes_the_speculative_transcript_and_prepared_answer_stale():
    stt = CountingSTT()
    turn = a_turn(stt)
    turn.speculate()
    await asyncio.sleep(0.01)
    assert turn.needs_answer
    reply = HeldReply()
    turn.prepare(reply, TurnMetrics(1))
    assert not turn.needs_answer and turn.prepared() is not None
    _, running = turn.prepared()
    turn.on_speech(turn.last_speech + WINDOW)  # the user goes on
    assert turn.prepared() is None and turn.metrics is None and turn.speech_ms == 320 + WINDOW_MS
    await asyncio.sleep(0.01)
    assert running.cancelled()
    metrics = TurnMetrics(1)
    assert await turn.final_transcript(metrics) == f"{11 * WINDOW + SPEECH_TAIL_SAMPLES} samples"
    assert not metrics.stt_speculative and len(stt.lengths) == 2
    assert turn.tasks() and all(task.done() for task in turn.tasks())


def test_metrics_values_are_rounded_and_measured_from_the_end_of_speech():
    metrics = TurnMetrics(3, speech_end=10.0, endpoint_ms=200.04, stt_final_ms=80.0, stt_speculative=True)
    timings = ReplyTimings(llm_ttft_ms=50.04, first_audio_at=10.4)
    values = metrics.values(timings)
    assert values["turn"] == 3 and values["voice_to_voice_ms"] == 400.0 and values["endpoint_ms"] == 200.0
    assert values["llm_ttft_ms"] == 50.0
    assert values["first_chunk_ms"] is None and values["stt_speculative"] is True


class ReadingLLM:
    """An end-of-turn reading that comes when the test releases it."""

    def __init__(self):
        self.release = asyncio.Event()

    async def end_of_turn_logprob(self, messages, answering=False):
        await self.release.wait()
        return -0.1


async def test_the_turn_tells_when_its_speculative_transcript_and_each_signal_come_in():
    from voice_agent.turn_taking.turn_signals import PauseSignals

    news: list[str] = []
    turn = a_turn(CountingSTT(), on_news=lambda _: news.append("news"))
    turn.speculate()
    assert news == []
    await asyncio.sleep(0.01)
    assert news == ["news"]  # the transcript
    llm = ReadingLLM()
    turn.gather(PauseSignals("Hello.", None, llm, [], None, None))
    await asyncio.sleep(0.01)
    assert news == ["news"]  # the reading is not in yet
    llm.release.set()
    await asyncio.sleep(0.01)
    assert news == ["news", "news"]
    # A speculation made stale by more speech is cancelled: no news of it.
    turn.on_speech(turn.last_speech + WINDOW)
    turn.speculate()
    turn.on_speech(turn.last_speech + WINDOW)
    turn.speculate()
    await asyncio.sleep(0.01)
    assert news == ["news", "news", "news"]
    for task in turn.tasks():
        task.cancel()


async def test_a_turn_that_continues_an_earlier_one_starts_its_speech_where_that_one_did():
    turn = UserTurn(
        1,
        1000,
        1000 + 10 * WINDOW,
        speech_ms=320,
        over_agent=True,
        timeline=AudioTimeline(),
        stt=None,
        speech_start=1000 + 4800,
    )
    turn.extend_back(200)
    assert (turn.start, turn.speech_start) == (200, 200 + 4800)
    turn.extend_back(900)  # later than its start: nothing moves
    assert (turn.start, turn.speech_start) == (200, 200 + 4800)


def a_long_turn(stt, seconds: float = 60.0) -> UserTurn:
    timeline = AudioTimeline(clock=lambda: 0.0)
    timeline.append(np.zeros(int(seconds * 16000), np.float32))
    return UserTurn(1, 0, WINDOW, speech_ms=WINDOW_MS, over_agent=False, timeline=timeline, stt=stt)


def speak(turn: UserTurn, until_s: float, pause_every_s: float = 0.0, pause_windows: int = 0) -> None:
    """Speech windows up to ``until_s``, with a pause of ``pause_windows`` windows every ``pause_every_s``."""
    end = turn.last_speech
    spoken = 0
    while end + WINDOW <= until_s * 16000:
        end += WINDOW
        spoken += WINDOW
        if pause_every_s and spoken >= pause_every_s * 16000:
            end += pause_windows * WINDOW
            spoken = 0
        turn.on_speech(end)


async def test_a_turn_under_the_settling_length_is_read_whole_at_each_pause():
    stt = CountingSTT()
    turn = a_long_turn(stt)
    speak(turn, 14.0, pause_every_s=3.0, pause_windows=10)
    turn.speculate()
    text, _ = await turn._speculative
    assert stt.lengths == [turn.last_speech + SPEECH_TAIL_SAMPLES] and text == f"{stt.lengths[0]} samples"


async def test_a_long_turn_is_read_in_settled_parts_then_only_the_rest():
    stt = CountingSTT()
    turn = a_long_turn(stt)
    speak(turn, 50.0, pause_every_s=4.0, pause_windows=10)  # 320 ms pauses: each can settle
    await asyncio.sleep(0.01)
    parts = list(stt.lengths)
    # Two parts of 15 s or a little more (cut at the first pause past 15 s), each read once.
    assert len(parts) == 2 and all(15 * 16000 <= n < 20 * 16000 for n in parts)
    turn.speculate()
    text, _ = await turn._speculative
    rest = turn.last_speech + SPEECH_TAIL_SAMPLES - sum(parts)
    assert stt.lengths == [*parts, rest] and rest < 20 * 16000
    assert text == " ".join(f"{n} samples" for n in [*parts, rest])
    # More speech, another pause: only the rest again, the parts are not read a second time.
    speak(turn, 52.0)
    metrics = TurnMetrics(1)
    text = await turn.final_transcript(metrics)
    rest = turn.last_speech + SPEECH_TAIL_SAMPLES - sum(parts)
    assert stt.lengths[len(parts) + 1 :] == [rest]
    assert text == " ".join(f"{n} samples" for n in [*parts, rest])


async def test_a_long_turn_without_pauses_long_enough_is_read_whole():
    stt = CountingSTT()
    turn = a_long_turn(stt)
    speak(turn, 40.0, pause_every_s=2.0, pause_windows=3)  # 96 ms gaps: between words, not phrases
    turn.speculate()
    await turn._speculative
    assert stt.lengths == [turn.last_speech + SPEECH_TAIL_SAMPLES]


async def test_a_turn_extended_back_is_settled_again_from_its_new_start():
    stt = CountingSTT()
    turn = a_long_turn(stt)
    turn.start = turn.speech_start = 16000
    turn._settled_upto = 16000
    speak(turn, 40.0, pause_every_s=4.0, pause_windows=10)
    await asyncio.sleep(0.01)
    assert stt.lengths  # a part was settled
    turn.extend_back(0)
    stt.lengths.clear()
    turn.speculate()
    await turn._speculative
    assert stt.lengths == [turn.last_speech + SPEECH_TAIL_SAMPLES]  # whole, from the new start
