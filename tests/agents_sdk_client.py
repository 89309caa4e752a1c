"""The OpenAI Agents SDK's realtime runner, with a ``@function_tool``, as a client of ``/v1/realtime``.

Run with a Python that has ``openai-agents`` (its own venv: the SDK pins
``websockets<17``, below ours), not imported by the test suite:

    python tests/agents_sdk_client.py ws://127.0.0.1:8000/v1/realtime?model=x VOICE "What is the weather in Paris?"
    python tests/agents_sdk_client.py ws://127.0.0.1:8000/v1/realtime?model=x VOICE question.pcm

It asks the question as typed text, or speaks it (a file of 24 kHz PCM16,
streamed at real time), runs the tool when the server hands a call over, and
prints one JSON line: the tool's calls, the SDK's event types, the errors it
reported, the loudest sample of the audio it played, and the user's and the
assistant's last transcripts.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner

CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather now in a city."""
    CALLS.append(city)
    return json.dumps({"sky": "sunny", "celsius": 21})


async def main(url: str, voice: str, question: str) -> dict:
    agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.", tools=[get_weather])
    runner = RealtimeRunner(agent, config={"model_settings": {"voice": voice}, "tracing_disabled": True})
    session = await runner.run(model_config={"url": url, "api_key": "unused"})
    types: list[str] = []
    errors: list[str] = []
    audio = bytearray()
    transcript = heard = ""
    async with session:
        if question.endswith(".pcm"):
            asyncio.create_task(speak(session, Path(question).read_bytes()))
        else:
            await session.send_message(question)
        async for event in session:
            if event.type != "raw_model_event":
                types.append(event.type)
            if event.type == "error":
                errors.append(str(event.error)[:300])
            elif event.type == "audio":
                audio += event.audio.data
            elif event.type == "history_updated":
                heard = last_transcript(event.history, "user") or heard
                transcript = last_transcript(event.history, "assistant") or transcript
            elif event.type == "agent_end" and audio and (CALLS == [] or "tool_end" in types):
                break  # the answer (after the tool's result, if it called one) has been said
    loudest = int(np.abs(np.frombuffer(bytes(audio), "<i2")).max()) if audio else 0
    return {
        "calls": CALLS,
        "types": types,
        "errors": errors,
        "loudest": loudest,
        "heard": heard,
        "transcript": transcript,
    }


def last_transcript(history: list, role: str) -> str:
    items = [i for i in history if getattr(i, "role", None) == role and i.content]
    return (getattr(items[-1].content[0], "transcript", None) or "") if items else ""


async def speak(session, audio: bytes) -> None:
    """24 kHz PCM16 in 20 ms pieces at real time, then a second of silence to end the turn."""
    audio += bytes(2 * 24000)
    for start in range(0, len(audio), 960):
        await session.send_audio(audio[start : start + 960])
        await asyncio.sleep(0.02)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(asyncio.wait_for(main(*sys.argv[1:4]), 90))))
