"""End to end: a session whose input goes through WebRTC's echo canceller still hears and answers the user."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.conftest import start_server, stop_server
from tests.speech import silence, speech
from tests.wsclient import NativeClient

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cancelling_url():
    process, base_url, log_file = start_server(
        "--echo-cancellation", "on", "--noise-suppression", "1", "--llm-temperature", "0", "--llm-max-tokens", "40"
    )
    yield base_url.replace("http://", "ws://") + "/ws"
    stop_server(process, log_file)


@pytest.mark.parametrize("rate", [16000, 8000])
async def test_a_spoken_question_is_heard_through_the_canceller_and_answered(cancelling_url, rate):
    client = await NativeClient.connect(cancelling_url, rate)
    await client.stream(np.concatenate([speech("What is the capital of France?", rate), silence(0.3, rate)]))
    streaming = asyncio.create_task(client.stream(silence(6.0, rate)))
    final = await client.wait_for(lambda m: m.get("type") == "transcript" and m["role"] == "user" and m["final"], 15)
    assert {"capital", "france"} <= set("".join(c for c in final["text"].lower() if c.isalpha() or c == " ").split())
    agent = await client.wait_for(lambda m: m.get("type") == "transcript" and m["role"] == "agent" and m["final"], 20)
    assert agent["text"].strip()
    await streaming
    audio = np.concatenate([np.frombuffer(r.message, "<i2") for r in client.audio_messages()])
    assert np.abs(audio).max() > 1000  # spoken, not silence
    await client.close()
