"""An LLM backend cut short: at most ``limit`` deltas per answer (a client's ``max_output_tokens``).

llama.cpp, vLLM and OpenAI-compatible streams send one token per delta, so a
delta count is a token count. Closing the inner stream aborts the generation.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from .base import LLMBackend, LLMWrapper, Message


class TokenLimited(LLMWrapper):
    def __init__(self, llm: LLMBackend, limit: int):
        super().__init__(llm)
        self._limit = limit

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
