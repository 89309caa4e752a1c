"""First chunks before later chunks: a reply with its first chunk out gives way to another's first chunk."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.test_reply import RATE, RecordingLLM, SlowTTS
from voice_agent.engines.first_chunks import GIVE_WAY_AHEAD_S, FirstChunks, has_audio_in_hand
from voice_agent.engines.interfaces import TTSBackend
from voice_agent.reply.pipeline import Reply


async def test_give_way_returns_at_once_when_no_other_reply_waits():
    chunks = FirstChunks()
    chunks.waiting("me")
    await asyncio.wait_for(chunks.give_way("me", lambda: True), 0.01)


async def test_give_way_waits_until_the_other_reply_has_its_first_chunk():
    chunks = FirstChunks()
    chunks.waiting("other")
    waiting = asyncio.create_task(chunks.give_way("me", lambda: True))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    chunks.done("other")
    await asyncio.wait_for(waiting, 0.1)
    assert chunks.others_waiting("me") == 0


async def test_give_way_stops_waiting_once_the_reply_may_wait_no_more():
    chunks = FirstChunks()
    chunks.waiting("other")
    in_hand = [True]
    waiting = asyncio.create_task(chunks.give_way("me", lambda: in_hand[0]))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    in_hand[0] = False
    await asyncio.wait_for(waiting, 0.5)
    assert chunks.others_waiting("me") == 1


def reply(
    log: list[str],
    chunks: FirstChunks,
    *,
    held: bool = False,
    tts: TTSBackend | None = None,
) -> Reply:
    """A reply of three chunks under ``chunks``; 10 ms of synthesis a chunk unless ``tts`` is given."""
    return Reply(
        llm=RecordingLLM("Sure, I can. Here is more.", log),
        tts=tts or SlowTTS(log, seconds=0.01),
        messages=[],
        output_rate=RATE,
        lead_s=10.0,
        emit=lambda event: None,
        turn=1,
        user_text="hi",
        first_chunk_min_words=1,
        held=held,
        first_chunks=chunks,
    )


async def test_a_held_reply_reads_no_token_past_its_first_chunk_while_another_waits_for_its_first():
    log: list[str] = []
    chunks = FirstChunks()
    chunks.waiting("another session's reply")
    held = reply(log, chunks, held=True)
    running = asyncio.create_task(held.run())
    await asyncio.sleep(0.3)
    assert log == ["token Sure,", "synthesize Sure,", "synthesized Sure,"]
    assert chunks.others_waiting("another session's reply") == 0  # its own first chunk no longer counts
    chunks.done("another session's reply")
    held.set_flowing(True)
    await asyncio.wait_for(running, 5)
    assert held.text == "Sure, I can. Here is more."


async def test_a_playing_reply_with_little_audio_in_hand_goes_on():
    log: list[str] = []
    chunks = FirstChunks()
    chunks.waiting("another session's reply")
    playing = reply(log, chunks, held=False)  # 100 ms of audio a chunk: less than the margin
    await asyncio.wait_for(playing.run(), 5)
    assert playing.text == "Sure, I can. Here is more."


@pytest.mark.parametrize("fails", [False, True])
async def test_a_reply_that_ends_counts_as_waiting_no_more(fails):
    class Failing(RecordingLLM):
        async def stream_chat(self, messages):
            raise RuntimeError("the LLM is gone")
            yield ""

    chunks = FirstChunks()
    log: list[str] = []
    ended = reply(log, chunks, held=False)
    if fails:
        ended._llm = Failing("", log)
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(ended.run(), 5)
    else:
        await asyncio.wait_for(ended.run(), 5)
    assert chunks.others_waiting("anyone") == 0


async def test_give_way_does_not_wait_while_work_waits_for_an_llm_instance():
    # The waiting reply may need the very instance this one holds: finishing frees it.
    queued = [1]
    chunks = FirstChunks(lambda: queued[0])
    chunks.waiting("other")
    await asyncio.wait_for(chunks.give_way("me", lambda: True), 0.01)
    queued[0] = 0
    waiting = asyncio.create_task(chunks.give_way("me", lambda: True))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    queued[0] = 1
    await asyncio.wait_for(waiting, 0.5)


async def test_give_way_waits_while_a_final_transcript_waits_or_runs():
    finals = [1]
    chunks = FirstChunks(finals_in_flight=lambda: finals[0])
    waiting = asyncio.create_task(chunks.give_way("me", lambda: True))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert chunks.others_waiting("me") == 1
    finals[0] = 0
    await asyncio.wait_for(waiting, 0.5)


async def test_a_later_chunk_waits_even_while_work_waits_for_an_llm_instance():
    # Synthesizing frees no instance, so it gives way whoever waits for one.
    chunks = FirstChunks(lambda: 1)
    chunks.waiting("other")
    await asyncio.wait_for(chunks.give_way("me", lambda: True), 0.01)  # a token: goes on
    waiting = asyncio.create_task(chunks.give_way("me", lambda: True, frees_instance=False))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    chunks.done("other")
    await asyncio.wait_for(waiting, 0.5)


async def until_logged(log: list[str], line: str) -> None:
    async def logged() -> None:
        while line not in log:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(logged(), 5)


class GatedTTS:
    """Two seconds of audio a chunk, each synthesized once the test lets it."""

    sample_rate = RATE

    def __init__(self, log: list[str]):
        self.log = log
        self.go = asyncio.Event()
        self.go.set()

    async def synthesize(self, text):
        self.log.append(f"synthesize {text}")
        await self.go.wait()
        self.log.append(f"synthesized {text}")
        yield np.full(2 * RATE, 0.2, dtype=np.float32)


async def test_a_playing_reply_with_audio_in_hand_synthesizes_no_later_chunk_while_another_waits():
    log: list[str] = []
    chunks = FirstChunks(
        lambda: 1, first_audio_first=True
    )  # work waits for an LLM instance: its tokens go on, its chunks wait
    chunks.waiting("another session's reply")
    playing = reply(log, chunks, tts=GatedTTS(log))
    running = asyncio.create_task(playing.run())
    try:
        await until_logged(log, "token more.")
        await asyncio.sleep(0.1)
        assert [line for line in log if line.startswith("synthesize")] == ["synthesize Sure,", "synthesized Sure,"]
        chunks.done("another session's reply")
        await until_logged(log, "synthesized I can.")
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_a_reply_waits_for_its_first_chunk_until_that_chunk_is_synthesized():
    log: list[str] = []
    chunks = FirstChunks(first_audio_first=True)
    tts = GatedTTS(log)
    tts.go.clear()
    playing = reply(log, chunks, tts=tts)
    running = asyncio.create_task(playing.run())
    try:
        await until_logged(log, "synthesize Sure,")
        assert chunks.others_waiting("another session's reply") == 1  # its first chunk is out, not its audio
        tts.go.set()
        await until_logged(log, "synthesized Sure,")
        await asyncio.sleep(0)
        assert chunks.others_waiting("another session's reply") == 0
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert chunks.others_waiting("anyone") == 0


def test_the_audio_in_hand_must_outlast_the_slowest_chunk_synthesis():
    assert has_audio_in_hand(GIVE_WAY_AHEAD_S + 0.2, chunk_took_s=0.1)
    assert not has_audio_in_hand(GIVE_WAY_AHEAD_S + 0.2, chunk_took_s=0.3)  # a loaded machine: it goes on
    assert not has_audio_in_hand(GIVE_WAY_AHEAD_S, chunk_took_s=0.0)


async def test_a_reply_whose_chunks_were_slow_to_synthesize_goes_on_with_audio_in_hand():
    log: list[str] = []
    now = [0.0]

    class SlowOnTheClock(GatedTTS):
        async def synthesize(self, text):
            now[0] += 1.5  # each chunk takes 1.5 s on the reply's clock, for 2 s of audio
            async for piece in super().synthesize(text):
                yield piece

    chunks = FirstChunks(first_audio_first=True)
    chunks.waiting("another session's reply")
    playing = Reply(
        llm=RecordingLLM("Sure, I can. Here is more.", log),
        tts=SlowOnTheClock(log),
        messages=[],
        output_rate=RATE,
        lead_s=10.0,
        emit=lambda event: None,
        turn=1,
        user_text="hi",
        first_chunk_min_words=1,
        first_chunks=chunks,
        clock=lambda: now[0],
    )
    running = asyncio.create_task(playing.run())
    try:
        await until_logged(log, "synthesized I can.")  # 2 s in hand is less than 1 s beside 1.5 s a chunk
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_without_first_audio_first_later_chunks_are_synthesized_while_another_waits():
    log: list[str] = []
    chunks = FirstChunks(lambda: 1)
    chunks.waiting("another session's reply")
    playing = reply(log, chunks, tts=GatedTTS(log))
    running = asyncio.create_task(playing.run())
    try:
        await until_logged(log, "synthesized Here is more.")
        assert chunks.others_waiting("another session's reply") == 0  # done at its first chunk, before its audio
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
