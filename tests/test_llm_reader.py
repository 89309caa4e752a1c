"""The end-of-turn reading goes to the reader's context only while every answer instance is busy (fakes)."""

from __future__ import annotations

import llama_cpp
import pytest

from voice_agent.engines.llm import llamacpp
from voice_agent.engines.llm.llamacpp import LlamaCppBackend

# With llama.cpp faked, but in the models tier: the fast tier refuses LlamaCppBackend's constructor outright.
pytestmark = pytest.mark.models


class FakeLlama:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(llama_cpp, "Llama", FakeLlama)
    monkeypatch.setattr(llamacpp, "_warn_of_amx", lambda: None)
    monkeypatch.setattr(llamacpp, "_control_tokens", lambda llama: frozenset())
    backend = LlamaCppBackend("model.gguf", instances=2)
    read_on: list[FakeLlama] = []

    def evaluate(llama, messages):
        read_on.append(llama)
        return -0.5

    backend._end_of_turn_logprob = evaluate  # type: ignore[method-assign]
    backend.read_on = read_on  # type: ignore[attr-defined]
    yield backend
    backend._executor.shutdown()
    backend._reader.close()


def words(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_with_every_instance_answering_the_reading_goes_to_the_reader(backend):
    waits: list[tuple[str, str]] = []

    class Watcher:
        def stage_started(self, stage, kind, waited_s):
            waits.append((stage, kind))

    backend.wait_line.watchers.append(Watcher())
    for instance in backend._instances:
        instance.busy = True
    assert await backend.end_of_turn_logprob(words("What do you recommend for dinner?")) == -0.5
    assert backend.read_on == [backend._reader.llama]
    assert waits == [("llm", "reading")]
    assert all(instance.busy for instance in backend._instances)  # no answer's instance was touched


async def test_with_an_instance_idle_the_reading_fills_its_cache_as_before(backend):
    backend._instances[0].busy = True
    messages = words("Thank you. Goodbye.")
    assert await backend.end_of_turn_logprob(messages) == -0.5
    idle = backend._instances[1]
    assert backend.read_on == [idle.llama]
    assert idle.last_messages == messages and not idle.busy  # the answer to them finds them cached


async def test_a_reading_made_on_the_reader_is_not_made_again(backend):
    for instance in backend._instances:
        instance.busy = True
    messages = words("Tell me about your menu.")
    assert await backend.end_of_turn_logprob(messages) == -0.5
    assert await backend.end_of_turn_logprob(messages, answering=True) == -0.5
    assert len(backend.read_on) == 1
