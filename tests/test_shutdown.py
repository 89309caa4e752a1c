"""Graceful shutdown of a real server process on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest
import websockets

from tests.conftest import start_server
from tests.wsclient import NativeClient

pytestmark = pytest.mark.e2e

QUESTION = "Tell me a story about a dragon who learns to fly."


def agent_final(client: NativeClient) -> dict | None:
    return next((m for m in client.json("transcript") if m["role"] == "agent" and m["final"]), None)


async def closed(client: NativeClient, timeout: float) -> float:
    """Wait for the server to close ``client``; return when the close arrived."""
    await asyncio.wait_for(client._reader, timeout)
    return time.monotonic()


async def refuses_connections(ws_url: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with websockets.connect(ws_url, open_timeout=2) as ws:
                await ws.recv()  # a handshake that got through must be closed at once
        except (OSError, websockets.InvalidStatus, websockets.ConnectionClosed, TimeoutError):
            return True
        await asyncio.sleep(0.1)
    return False


async def start_answer(ws_url: str) -> NativeClient:
    client = await NativeClient.connect(ws_url)
    await client.ws.send(json.dumps({"type": "text", "text": QUESTION}))
    await client.wait_for(lambda m: m.get("type") == "metrics", 30)  # the agent is speaking
    return client


async def test_sigterm_lets_the_answer_finish_then_closes_with_1001_and_exits_0():
    process, base_url, log_file = start_server(
        "--llm-temperature", "0", "--llm-max-tokens", "40", "--shutdown-grace-s", "60"
    )
    ws_url = base_url.replace("http://", "ws://") + "/ws"
    try:
        idle = await NativeClient.connect(ws_url)
        talker = await start_answer(ws_url)
        assert agent_final(talker) is None
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)

        # A session with nothing to finish goes at once; new sessions are refused.
        await closed(idle, 5)
        assert (idle.ws.close_code, idle.ws.close_reason) == (1001, "server is shutting down")
        assert await refuses_connections(ws_url)

        # The one speaking finishes its answer, then goes.
        talker_closed = await closed(talker, 60)
        assert (talker.ws.close_code, talker.ws.close_reason) == (1001, "server is shutting down")
        final = agent_final(talker)
        assert final is not None and final["text"], talker.json()
        final_at = next(r.at for r in talker.received if r.message is final)
        assert signalled < final_at <= talker_closed
        spoken_s = sum(len(r.message) for r in talker.audio_messages()) / 2 / talker.rate
        assert spoken_s > 2.0  # the whole answer, not a cut-off first chunk
        assert not talker.json("error")
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log_file.close()
    log = Path(log_file.name).read_text()
    assert "shutting down: 2 live session(s)" in log and "Finished server process" in log


async def test_sigterm_closes_an_answer_that_outlasts_the_grace_period():
    grace_s = 1.0
    process, base_url, log_file = start_server(
        "--llm-temperature", "0", "--llm-max-tokens", "300", "--shutdown-grace-s", str(grace_s)
    )
    ws_url = base_url.replace("http://", "ws://") + "/ws"
    try:
        talker = await start_answer(ws_url)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        talker_closed = await closed(talker, 20)
        assert (talker.ws.close_code, talker.ws.close_reason) == (1001, "server is shutting down")
        assert grace_s <= talker_closed - signalled < grace_s + 5
        assert agent_final(talker) is None  # cut off mid-answer
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log_file.close()
