"""The turns a Session commits on real audio, for comparing two versions of the code.

Real Silero VAD; STT, LLM and TTS are instant fakes (the STT's text depends
only on the audio's length, so the end-of-turn rules see several kinds of
transcript), and the audio is fed as fast as the event loop takes it, so the
output depends only on the code: run it once per tree and compare, e.g.

    PYTHONPATH=OLD .venv/bin/python experiments/session_parity.py AUDIO... > old.json
    PYTHONPATH=NEW .venv/bin/python experiments/session_parity.py AUDIO... > new.json
    cmp old.json new.json

The TTS says nothing, so the agent is never heard and barge-in is not exercised.
"""

import asyncio
import json
import sys

import numpy as np
import soundfile

from voice_agent.audio import resample
from voice_agent.config import Settings
from voice_agent.engines.loader import Engines
from voice_agent.protocols.events import AudioReceived, Metrics, Transcript
from voice_agent.session import Session
from voice_agent.engines.vad import SileroVAD

TEXTS = ["That is fine.", "I want to go to", "Well um", "Yes.", "What about the remote control?"]


class STT:
    def __init__(self, calls):
        self.calls = calls

    async def transcribe(self, audio):
        self.calls.append(len(audio))
        await asyncio.sleep(0)
        return TEXTS[(len(audio) // 512) % len(TEXTS)]


class LLM:
    name = "fake"

    async def prefill(self, messages):
        pass

    async def stream_chat(self, messages):
        yield "Okay."

    async def end_of_turn_logprob(self, messages, *, answering=False):
        return None  # no opinion: the end-of-turn rule decides on the words and the silence


class TTS:
    sample_rate = 16000

    async def synthesize(self, text):
        if False:
            yield np.zeros(0, np.float32)


async def run(path, vad):
    audio, rate = soundfile.read(path, dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    audio = resample(audio, rate, 16000)
    calls, events = [], []
    session = Session(Engines(vad=vad, stt=STT(calls), llm=LLM(), tts=TTS()), Settings(), events.append, "p")
    for start in range(0, len(audio), 320):
        session.handle(AudioReceived(audio[start : start + 320]))
        for _ in range(4):
            await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    await session.close()
    finals = [e.text for e in events if isinstance(e, Transcript) and e.role == "user" and e.final]
    turns = [e.values["turn"] for e in events if isinstance(e, Metrics)]
    flags = [(e.values["stt_speculative"], e.values["preemptive"]) for e in events if isinstance(e, Metrics)]
    return {"stt_calls": calls, "finals": finals, "turns": turns, "flags": flags, "history": len(session.history)}


async def main():
    vad = SileroVAD()
    out = {}
    for path in sys.argv[1:]:
        out[path.rsplit("/", 1)[-1]] = await run(path, vad)
    print(json.dumps(out))


asyncio.run(main())
