"""The in-process vLLM backend (--llm vllm), for real on CPU.

vLLM lives in .venv-vllm, so these tests run there:
``scripts/setup-vllm && .venv-vllm/bin/python -m pytest tests/test_vllm.py``
(``scripts/test`` does both). Under .venv they are skipped.
"""

from __future__ import annotations

import asyncio
import os

import pytest
import pytest_asyncio

try:
    import vllm  # noqa: F401
except ImportError:
    if os.environ.get("VOICE_AGENT_REQUIRE_VLLM") == "1":
        raise
    pytest.skip("vLLM is in .venv-vllm: run this file with .venv-vllm/bin/python", allow_module_level=True)

from prometheus_client import REGISTRY  # noqa: E402  (a vLLM dependency)

from tests.conftest import start_server, stop_server  # noqa: E402
from tests.vllm_support import DTYPE, ENGINE_ARGS, VLLM_ENV, spoken_turn  # noqa: E402
from voice_agent.engines.llm.vllm_engine import VLLMBackend  # noqa: E402

# The engine's output handler lives on the loop that first used it: one loop for the module.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

LONG_STORY = [
    {"role": "system", "content": "You are a storyteller."},
    {"role": "user", "content": "Tell me a long story about a brave knight and a dragon."},
]


async def test_a_voice_turn_with_vllm_in_process():
    # First, before the engine fixture exists: one engine at a time on this machine.
    process, base_url, log_file = await asyncio.to_thread(
        start_server, "--llm", "vllm", *ENGINE_ARGS, env=VLLM_ENV, ready_timeout=600
    )
    try:
        metrics, answer = await spoken_turn(base_url.replace("http://", "ws://") + "/ws")
        assert metrics["llm_ttft_ms"] > 0
    finally:
        stop_server(process, log_file)
    assert "paris" in answer.lower()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend():
    saved = {name: os.environ.get(name) for name in VLLM_ENV}
    os.environ.update(VLLM_ENV)  # read by the engine's subprocess
    try:
        # No model: the embedded SmolLM2, converted once by scripts/setup-vllm.
        backend = VLLMBackend(dtype=DTYPE, enforce_eager=True, max_tokens=400, temperature=0)
        await backend.warm_up()
        yield backend
        await backend.close()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def test_streams_a_reply(backend):
    deltas = [d async for d in backend.stream_chat([{"role": "user", "content": "What is the capital of France?"}])]
    assert len(deltas) > 1, "streamed in pieces"
    assert "paris" in "".join(deltas).lower()
    assert backend.engine.get_num_unfinished_requests() == 0


async def test_the_prompt_is_the_models_chat_template(backend):
    ids = backend.prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    text = backend.engine.get_tokenizer().decode(ids)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


async def engine_idle_within(backend: VLLMBackend, seconds: float) -> None:
    """Wait until the engine process has no request left; fail after ``seconds``.

    Pausing in "wait" mode returns once the engine core's scheduler holds no
    request, i.e. once the model no longer computes anything.
    """
    await asyncio.wait_for(backend.engine.pause_generation(mode="wait", clear_cache=False), seconds)
    await backend.engine.resume_generation()


async def test_closing_the_stream_aborts_the_request(backend):
    # Control: left alone, this answer runs for hundreds of tokens (tens of seconds here).
    async def consume() -> None:
        async for _ in backend.stream_chat(LONG_STORY):
            pass

    control = asyncio.create_task(consume())
    await asyncio.sleep(3.0)
    assert not control.done()
    assert backend.engine.get_num_unfinished_requests() == 1
    control.cancel()  # cancelling the consuming task aborts too
    await asyncio.gather(control, return_exceptions=True)
    assert backend.engine.get_num_unfinished_requests() == 0
    await engine_idle_within(backend, 5.0)

    stream = backend.stream_chat(LONG_STORY)
    for _ in range(5):
        await anext(stream)
    await stream.aclose()
    assert backend.engine.get_num_unfinished_requests() == 0
    await engine_idle_within(backend, 5.0)


def prefix_cache_hits() -> float:
    return sum(
        sample.value
        for family in REGISTRY.collect()
        if family.name == "vllm:prefix_cache_hits"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


async def test_the_next_turn_reuses_the_cached_prefix(backend, monkeypatch):
    monkeypatch.setattr(backend, "max_tokens", 16)  # only the prompt matters here
    # A system prompt and history that fill whole KV cache blocks (128 tokens on CPU).
    history = [{"role": "system", "content": "You are a helpful assistant. " * 40}]
    history += [{"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi! How can I help?"}]
    async for _ in backend.stream_chat(history + [{"role": "user", "content": "What is two plus two?"}]):
        pass
    hits = prefix_cache_hits()
    async for _ in backend.stream_chat(history + [{"role": "user", "content": "And three plus three?"}]):
        pass
    await asyncio.sleep(0.5)  # stats arrive with the engine's outputs
    assert prefix_cache_hits() - hits >= 128
