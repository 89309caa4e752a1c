"""Reply: the LLM → chunker → TTS → frames pipeline of one answer, with fake engines."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voice_agent.protocols.events import AgentAudio
from voice_agent.reply import Reply

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
    assert reply.text == "I'm not. Sorry about that."
    assert "token not." in log and log.count("token I'm") == 2  # generation stopped at the repeat
