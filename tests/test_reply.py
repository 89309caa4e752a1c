"""Reply: the LLM → chunker → TTS → frames pipeline of one answer, with fake engines."""

from __future__ import annotations

import asyncio

import numpy as np

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


async def test_the_llm_waits_while_the_first_chunk_is_synthesized():
    log: list[str] = []
    events: list = []
    reply = Reply(
        llm=RecordingLLM("Sure, I can. Here is more. And more.", log),
        tts=SlowTTS(log),
        messages=[],
        output_rate=RATE,
        lead_s=10.0,
        emit=events.append,
        turn=1,
        user_text="hi",
        first_chunk_min_words=1,
    )
    await asyncio.wait_for(reply.run(), 5)
    first_done = log.index("synthesized Sure,")
    # "Sure, " closes the first chunk; no other token is read until its audio exists.
    assert log[:3] == ["token Sure,", "synthesize Sure,", "synthesized Sure,"]
    assert log.index("token I") > first_done
    assert reply.text == "Sure, I can. Here is more. And more."
    assert sum(len(e.samples) for e in events if isinstance(e, AgentAudio)) == 4 * RATE // 10  # four chunks, 100 ms each
