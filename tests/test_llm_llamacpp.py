"""The embedded llama.cpp backend, with the real SmolLM2 model."""

from __future__ import annotations

import pytest

from voice_agent import threads
from voice_agent.llm.llamacpp import LlamaCppBackend


@pytest.fixture(scope="module")
def llm():
    return LlamaCppBackend(instances=1, max_tokens=60, temperature=0.0)


async def test_closing_a_stream_stops_its_worker_before_the_instance_is_free(llm):
    stream = llm.stream_chat([{"role": "user", "content": "Tell me a long story about a dragon."}])
    assert await anext(stream)
    await stream.aclose()
    # The instance is back in the pool only once nothing computes on it any more:
    # llama.cpp is not thread-safe, and the next request may take it at once.
    assert llm.idle_instances == 1
    assert threads.active_workers() == 0
    answer = [delta async for delta in llm.stream_chat([{"role": "user", "content": "Say hello."}])]
    assert "".join(answer).strip()
