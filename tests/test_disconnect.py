"""A client that disconnects mid-answer leaves no task or worker behind (in-process server)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import uvicorn

from tests.conftest import free_port
from tests.speech import silence, speech
from tests.wsclient import NativeClient
from voice_agent.config import Settings
from voice_agent.engines import threads
from voice_agent.engines.loader import load_engines
from voice_agent.server.app import create_app

pytestmark = pytest.mark.e2e


async def test_disconnect_mid_answer_leaves_nothing_running():
    settings = Settings(port=free_port(), llm_max_tokens=400)
    engines = await asyncio.to_thread(load_engines, settings)
    await engines.warm_up()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, engines),
            port=settings.port,
            log_level="warning",
            ws="websockets-sansio",
            lifespan="on",
        )
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    baseline = {t for t in asyncio.all_tasks()}
    try:
        client = await NativeClient.connect(f"ws://127.0.0.1:{settings.port}/ws")
        await client.stream(np.concatenate([speech("Tell me a long story about the sea."), silence(0.3)]))
        background = asyncio.create_task(client.stream(silence(8.0)))
        await client.wait_for(lambda m: m.get("type") == "metrics", 15)
        assert threads.active_workers() >= 1 or len(asyncio.all_tasks()) > len(baseline) + 2
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)
        client.ws.transport.abort()
        await asyncio.gather(client._reader, return_exceptions=True)
        for _ in range(100):
            leftover = {t for t in asyncio.all_tasks() if t not in baseline and t is not asyncio.current_task()}
            if not leftover and threads.active_workers() == 0:
                break
            await asyncio.sleep(0.05)
        assert threads.active_workers() == 0
        assert not leftover, leftover
        assert engines.llm.idle_instances == settings.llm_instances  # every LLM instance is free again
    finally:
        server.should_exit = True
        await serving
        await engines.close()
