"""An LLM backend cut short: at most ``limit`` deltas per answer (a client's ``max_output_tokens``).

llama.cpp, vLLM and OpenAI-compatible streams send one token per delta, so a
delta count is a token count. Closing the inner stream aborts the generation.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from .base import LLMBackend, Message


class TokenLimited:
    def __init__(self, llm: LLMBackend, limit: int):
        self._llm = llm
        self._limit = limit
        self.name = llm.name

    async def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[str, None]:
        """The answer, cut at the limit; answers with an agent's tools are never limited, so ``tools`` is unused
        (an inner LLM that offers a client's functions, ``ClientToolTurn``, offers them itself)."""
        stream = self._llm.stream_chat(messages)
        async with contextlib.aclosing(stream):
            count = 0
            async for delta in stream:
                yield delta
                count += 1
                if count >= self._limit:
                    return

    async def prefill(self, messages: list[Message]) -> None:
        await self._llm.prefill(messages)

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        return await self._llm.end_of_turn_logprob(messages, answering=answering)

    async def warm_up(self) -> None:
        await self._llm.warm_up()

    async def close(self) -> None:
        pass  # the backend is shared: its owner closes it
