"""End to end with every real default model, a real server process and a real WebSocket."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.speech import silence, speech
from tests.wsclient import NativeClient

pytestmark = pytest.mark.e2e

METRIC_FIELDS = (
    "turn",
    "voice_to_voice_ms",
    "endpoint_ms",
    "stt_final_ms",
    "stt_speculative",
    "llm_ttft_ms",
    "first_chunk_ms",
    "tts_ttfa_ms",
)


def words(text: str) -> set[str]:
    return set("".join(c for c in text.lower() if c.isalnum() or c.isspace()).split())


@pytest.mark.parametrize("rate", [16000, 48000])
async def test_a_spoken_question_gets_a_spoken_answer(ws_url, rate):
    client = await NativeClient.connect(ws_url, rate)
    await client.stream(np.concatenate([speech("What is the capital of France?", rate), silence(0.3, rate)]))
    streaming = asyncio.create_task(client.stream(silence(8.0, rate)))
    final = await client.wait_for(lambda m: m.get("type") == "transcript" and m["role"] == "user" and m["final"], 15)
    assert {"capital", "france"} <= words(final["text"])
    metrics = await client.wait_for(lambda m: m.get("type") == "metrics", 15)
    assert all(metrics.get(name) is not None for name in METRIC_FIELDS), metrics
    assert 0 < metrics["voice_to_voice_ms"] < 5000
    agent = await client.wait_for(lambda m: m.get("type") == "transcript" and m["role"] == "agent" and m["final"], 20)
    assert agent["text"].strip()
    await streaming
    frames = client.audio_messages()
    assert frames and all(len(r.message) == rate // 50 * 2 for r in frames)  # 20 ms PCM16 at the session rate
    audio = np.concatenate([np.frombuffer(r.message, "<i2") for r in frames])
    assert np.abs(audio).max() > 1000  # speech, not silence
    assert client.json("mark")
    # Audio arrives at about real time, not all at once.
    span = frames[-1].at - frames[0].at
    assert span > 0.6 * len(audio) / rate - 0.3
    await client.close()


async def test_barge_in_clears_and_stops_the_agent(ws_url):
    client = await NativeClient.connect(ws_url)
    question = "Tell me a long story about a brave knight and a dragon."
    await client.stream(np.concatenate([speech(question), silence(0.3)]))
    background = asyncio.create_task(client.stream(silence(10.0)))
    await client.wait_for(lambda m: m.get("type") == "metrics", 15)  # the agent is speaking
    await asyncio.sleep(0.4)
    background.cancel()
    interruption_started = asyncio.get_running_loop().time()
    await client.stream(np.concatenate([speech("Stop, please wait a moment."), silence(2.0)]))
    clear = await client.wait_for(lambda m: m.get("type") == "clear", 8)
    assert clear == {"type": "clear"}
    clear_index = next(i for i, r in enumerate(client.received) if r.message == {"type": "clear"})
    # After the clear, no more audio from the interrupted answer: the next audio
    # may only come after the interruption's own final transcript.
    later = client.received[clear_index + 1 :]
    next_final = next(
        (
            i
            for i, r in enumerate(later)
            if isinstance(r.message, dict)
            and r.message.get("type") == "transcript"
            and r.message["role"] == "user"
            and r.message["final"]
        ),
        len(later),
    )
    assert not any(isinstance(r.message, bytes) for r in later[:next_final])
    # The agent falls silent while it checks the words, before the clear; how fast
    # is for the benchmark (scripts/bench), this only catches an agent that talks on.
    last_agent_audio = max(r.at for r in client.received[:clear_index] if isinstance(r.message, bytes))
    assert last_agent_audio - interruption_started < 1.5
    interrupted = [m for m in client.json("transcript") if m["role"] == "agent" and m["final"]]
    assert interrupted, "the interrupted answer's heard part is reported"
    # The client was told what the agent did: it thought, spoke, and listened again from the clear on.
    await client.wait_for(lambda m: m.get("type") == "agent_state" and m["state"] == "listening", 8)
    assert [m["state"] for m in client.json("agent_state")][:3] == ["thinking", "speaking", "listening"]
    listening_index = next(
        i for i, r in enumerate(client.received) if r.message == {"type": "agent_state", "state": "listening"}
    )
    assert listening_index > clear_index
    await client.close()


async def test_bad_input_gets_errors_and_the_session_survives(ws_url):
    client = await NativeClient.connect(ws_url, rate=None)
    await client.ws.send("{not json")
    await client.ws.send(json.dumps({"type": "start", "sample_rate": 44100}))
    await client.ws.send(b"\x01\x02\x03")
    await client.ws.send(json.dumps(["not", "an", "object"]))
    await client.ws.send(json.dumps({"type": "no-such-type"}))
    await client.ws.send(b"\x00\x00" * 320)  # audio before start: the session runs at 16 kHz
    await client.ws.send(json.dumps({"type": "start", "sample_rate": 8000}))
    codes = set()
    for _ in range(100):
        codes = {m["code"] for m in client.json("error")}
        if len(codes) >= 6:
            break
        await asyncio.sleep(0.05)
    assert codes == {
        "invalid_json",
        "unsupported_sample_rate",
        "odd_length_audio",
        "invalid_message",
        "unknown_type",
        "start_after_input",
    }
    assert all(m["message"] for m in client.json("error"))
    # Still a working session, at 16 kHz.
    await client.stream(np.concatenate([speech("Hello, how are you today?"), silence(0.3)]))
    streaming = asyncio.create_task(client.stream(silence(5.0)))
    await client.wait_for(lambda m: m.get("type") == "metrics", 15)
    streaming.cancel()
    await client.close()


async def test_other_sessions_survive_a_client_that_vanishes_mid_answer(ws_url):
    rude = await NativeClient.connect(ws_url)
    await rude.stream(np.concatenate([speech("Tell me about the history of Rome."), silence(0.3)]))
    background = asyncio.create_task(rude.stream(silence(5.0)))
    await rude.wait_for(lambda m: m.get("type") == "metrics", 15)
    background.cancel()
    rude.ws.transport.abort()  # no close handshake
    polite = await NativeClient.connect(ws_url)
    await polite.stream(np.concatenate([speech("What is two plus two?"), silence(0.3)]))
    streaming = asyncio.create_task(polite.stream(silence(5.0)))
    await polite.wait_for(lambda m: m.get("type") == "metrics", 15)
    streaming.cancel()
    await polite.close()
