"""The OpenAI Agents SDK's realtime runner, with a ``@function_tool``, as a client of ``/v1/realtime``.

Run with a Python that has ``openai-agents`` (its own venv: the SDK pins
``websockets<17``, below ours), not imported by the test suite:

    python tests/agents_sdk_client.py ws://127.0.0.1:8000/v1/realtime?model=x VOICE "What is the weather in Paris?"

It asks the question as typed text, runs the tool when the server hands the
call over, and prints one JSON line: the tool's calls, the SDK's event types,
the errors it reported, the loudest sample of the audio it played and the
assistant's last transcript.
"""

from __future__ import annotations

import asyncio
import json
import sys

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
    transcript = ""
    async with session:
        await session.send_message(question)
        async for event in session:
            if event.type != "raw_model_event":
                types.append(event.type)
            if event.type == "error":
                errors.append(str(event.error)[:300])
            elif event.type == "audio":
                audio += event.audio.data
            elif event.type == "history_updated":
                said = [i for i in event.history if getattr(i, "role", None) == "assistant"]
                if said and said[-1].content:
                    transcript = said[-1].content[0].transcript or transcript
            elif event.type == "agent_end" and "tool_end" in types and audio:
                break  # the answer after the tool's result has been said
    loudest = int(np.abs(np.frombuffer(bytes(audio), "<i2")).max()) if audio else 0
    return {"calls": CALLS, "types": types, "errors": errors, "loudest": loudest, "transcript": transcript}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(asyncio.wait_for(main(*sys.argv[1:4]), 90))))
