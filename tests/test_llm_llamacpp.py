"""The embedded llama.cpp backend, with the real SmolLM2 model."""

from __future__ import annotations

import os

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


def test_q8_0_copy_is_made_once_and_loads(tmp_path):
    import llama_cpp

    from voice_agent.llm.llamacpp import default_model_path
    from voice_agent.llm.requantize import q8_0_copy

    copy = q8_0_copy(default_model_path(), tmp_path)
    assert copy.startswith(str(tmp_path)) and copy.endswith(".q8_0.gguf")
    made = os.stat(copy).st_mtime_ns
    assert q8_0_copy(default_model_path(), tmp_path) == copy
    assert os.stat(copy).st_mtime_ns == made  # cached, not converted again
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(copy)]  # no partial file left
    model = llama_cpp.Llama(model_path=copy, n_ctx=256, verbose=False)
    assert model.create_completion("The capital of France is", max_tokens=3, temperature=0)["choices"][0]["text"]


def test_q8_0_copy_falls_back_to_the_original_where_it_cannot_write(tmp_path, caplog):
    from voice_agent.llm.llamacpp import default_model_path
    from voice_agent.llm.requantize import q8_0_copy

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert q8_0_copy(default_model_path(), blocked / "cache") == default_model_path()
    assert "using it as it is" in caplog.text
