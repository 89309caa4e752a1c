"""Reply: the LLM → chunker → TTS → frames pipeline of one answer, with fake engines."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voice_agent.protocols.events import AgentAudio, Transcript
from voice_agent.reply.pipeline import NOTHING_TO_SAY, Reply

RATE = 16000


class RecordingLLM:
    """Yields one word per read, and logs each read."""

    def __init__(self, answer: str, log: list[str]):
        self.answer = answer
        self.log = log

    async def stream_chat(self, messages):
        for word in self.answer.split(" "):
            await asyncio.sleep(0.001)
            self.log.append(f"token {word}")
            yield word + " "


class SlowTTS:
    sample_rate = RATE

    def __init__(self, log: list[str], seconds: float = 0.1):
        self.log = log
        self.seconds = seconds

    async def synthesize(self, text):
        self.log.append(f"synthesize {text}")
        await asyncio.sleep(self.seconds)
        self.log.append(f"synthesized {text}")
        yield np.full(RATE // 10, 0.2, dtype=np.float32)


def make_reply(llm, tts, emit=lambda event: None, **options) -> Reply:
    return Reply(
        llm=llm, tts=tts, messages=[], output_rate=RATE, lead_s=10.0, emit=emit, turn=1, user_text="hi", **options
    )


async def test_the_llm_waits_while_the_first_chunk_is_synthesized():
    log: list[str] = []
    events: list = []
    reply = make_reply(
        RecordingLLM("Sure, I can. Here is more. And more.", log), SlowTTS(log), events.append, first_chunk_min_words=1
    )
    await asyncio.wait_for(reply.run(), 5)
    first_done = log.index("synthesized Sure,")
    # "Sure, " closes the first chunk; no other token is read until its audio exists.
    assert log[:3] == ["token Sure,", "synthesize Sure,", "synthesized Sure,"]
    assert log.index("token I") > first_done
    assert reply.text == "Sure, I can. Here is more. And more."
    assert (
        sum(len(e.samples) for e in events if isinstance(e, AgentAudio)) == 4 * RATE // 10
    )  # four chunks, 100 ms each


async def test_cancelling_while_the_first_chunk_is_synthesized_closes_the_llm_stream_at_once():
    # The LLM backend frees its model instance when its stream closes; a stream
    # left for the garbage collector would free it while its worker still runs.
    log: list[str] = []
    reply = make_reply(
        ClosingLLM("Sure, I can. Here is more.", log), SlowTTS(log, seconds=1.0), first_chunk_min_words=1
    )
    running = asyncio.create_task(reply.run())
    while "synthesize Sure," not in log:
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert log[-1] == "stream closed"


class ClosingLLM(RecordingLLM):
    async def stream_chat(self, messages):
        try:
            async for delta in super().stream_chat(messages):
                yield delta
        finally:
            self.log.append("stream closed")


async def test_an_answer_ends_at_its_first_repeated_sentence():
    log: list[str] = []
    reply = make_reply(
        RecordingLLM("I'm not. Sorry about that. I'm not. I'm not. I'm not. I'm not.", log), SlowTTS(log, seconds=0.01)
    )
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "I'm not. Sorry about that." and reply.cut_by == "repeated_chunk"
    assert "token not." in log and log.count("token I'm") == 2  # generation stopped at the repeat


async def test_the_answer_stops_at_the_sentence_limit():
    log: list[str] = []
    reply = make_reply(
        RecordingLLM("One more. Two more. Three more. Four more.", log), SlowTTS(log, 0.01), max_sentences=2
    )
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "One more. Two more." and reply.cut_by == "sentence_limit"
    assert "token Three" not in log  # generation stopped at the limit


async def test_a_word_loop_inside_a_sentence_ends_the_answer_at_the_last_clean_sentence():
    log: list[str] = []
    answer = "Sure. You can take the bus to double double double double double double double."
    reply = make_reply(RecordingLLM(answer, log), SlowTTS(log, 0.01))
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "Sure." and reply.cut_by == "loop"
    assert log.count("token double") == 3  # stopped at the third in a row


async def test_a_repeated_phrase_ends_the_answer_at_the_last_clean_sentence():
    log: list[str] = []
    answer = "We open at nine to five. We are open nine to five on weekdays and nine to five on weekends."
    reply = make_reply(RecordingLLM(answer, log), SlowTTS(log, 0.01))
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "We open at nine to five."
    assert "token weekends." not in log


async def test_tts_and_the_transcript_get_the_speakable_text():
    log: list[str] = []
    events: list = []
    reply = make_reply(RecordingLLM("**Sure!** It costs $5. 😀", log), SlowTTS(log, 0.01), events.append)
    await asyncio.wait_for(reply.run(), 5)
    assert [entry for entry in log if entry.startswith("synthesize ")] == ["synthesize Sure! It costs 5 dollars."]
    assert reply.text == "Sure! It costs 5 dollars."
    assert [e.text for e in events if isinstance(e, Transcript)] == ["Sure! It costs 5 dollars."]


class LongTTS:
    """Each chunk is ``seconds`` of audio, synthesized at once; logs the audio sent when each starts."""

    sample_rate = RATE

    def __init__(self, seconds: float, sent: list[float], started: list[float]):
        self.seconds = seconds
        self.sent = sent
        self.started = started

    async def synthesize(self, text):
        self.started.append(sum(self.sent))
        yield np.full(int(RATE * self.seconds), 0.1, dtype=np.float32)


def sentences(count: int) -> str:
    return " ".join(f"Sentence number {i}." for i in range(count))


async def test_a_held_reply_synthesizes_only_a_bounded_amount_ahead():
    sent: list[float] = []
    started: list[float] = []
    reply = make_reply(RecordingLLM(sentences(20), []), LongTTS(0.5, sent, started), held=True, audio_ahead_s=1.0)
    running = asyncio.create_task(reply.run())
    await asyncio.sleep(0.5)
    # 1 s of queue: two 0.5 s chunks fill it, a third waits for room. Unbounded, all 20 were synthesized.
    assert len(started) <= 3
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_a_long_answer_is_synthesized_just_ahead_of_playback():
    sent: list[float] = []
    started: list[float] = []

    def emit(event):
        if isinstance(event, AgentAudio):
            sent.append(len(event.samples) / RATE)

    chunk_s, ahead_s = 0.1, 0.2
    reply = Reply(
        llm=RecordingLLM(sentences(15), []),
        tts=LongTTS(chunk_s, sent, started),
        messages=[],
        output_rate=RATE,
        lead_s=0.04,
        emit=emit,
        turn=1,
        user_text="hi",
        audio_ahead_s=ahead_s,
    )
    await asyncio.wait_for(reply.run(), 10)
    assert len(started) == 15 and sum(sent) == pytest.approx(15 * chunk_s)
    for index, sent_s in enumerate(started):
        synthesized_s = index * chunk_s
        # Chunk n starts once the queue has room: at most the queue, one chunk and the lead ahead of what was sent.
        assert synthesized_s - sent_s <= ahead_s + chunk_s + 0.04 + 0.001
    # And it does run ahead: the next chunk is synthesized before the one before it has been sent.
    assert max(index * chunk_s - sent_s for index, sent_s in enumerate(started)) >= chunk_s


@pytest.mark.parametrize("answer", ["| | | |\n|---|---|", "double double double double and more.", ""])
async def test_an_answer_with_nothing_speakable_says_so_instead_of_staying_silent(answer):
    log: list[str] = []
    reply = make_reply(RecordingLLM(answer, log), SlowTTS(log, 0.01))
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == NOTHING_TO_SAY and reply.said_nothing


class PaddedTTS:
    """Like Piper: each sentence starts with 40 ms of digital silence, then a 200 Hz tone."""

    sample_rate = RATE

    async def synthesize(self, text):
        t = np.arange(RATE // 5) / RATE
        voice = (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
        yield np.concatenate([np.zeros(RATE * 40 // 1000, np.float32), voice])


async def test_the_answer_starts_at_its_first_sound_and_later_chunks_keep_their_lead_in():
    events: list = []
    reply = make_reply(RecordingLLM("Yes, we are open. We close at ten.", []), PaddedTTS(), events.append)
    await asyncio.wait_for(reply.run(), 5)
    audio = np.concatenate([e.samples for e in events if isinstance(e, AgentAudio)])
    loud = np.flatnonzero(np.abs(audio) >= 0.003)
    # The first chunk's 40 ms lead-in is cut to about 5 ms; the second's stays whole (and the first's
    # tail is padded to a whole 20 ms frame): a pause between the two.
    assert len(reply.chunks) == 2
    assert 0.003 <= loud[0] / RATE <= 0.007
    gaps = np.diff(loud) / RATE
    [pause] = gaps[gaps > 0.01]
    assert 0.04 <= pause <= 0.061


async def test_an_answer_ends_where_a_sentence_repeats_the_end_of_an_earlier_one():
    log: list[str] = []
    reply = make_reply(RecordingLLM("No, I'm not. I'm not. I'm not.", log), SlowTTS(log, seconds=0.01))
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "No, I'm not." and reply.cut_by == "repeated_chunk"
    reply = make_reply(RecordingLLM("We open at nine. Not at nine thirty.", log), SlowTTS(log, seconds=0.01))
    await asyncio.wait_for(reply.run(), 5)
    assert reply.text == "We open at nine. Not at nine thirty."  # a shared word is not a repeat
