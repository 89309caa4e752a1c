"""An LLM backend that says words known in advance (a greeting, an apology).

They go through the chunker and TTS like a generated answer, so they can be
interrupted like one.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from .base import Message


class ScriptedLLM:
    name = "scripted"

    def __init__(self, text: str):
        self._text = text

    async def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[str, None]:
        yield self._text  # fixed words call no tools

    async def prefill(self, messages: list[Message]) -> None:
        pass

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        return None

    async def warm_up(self) -> None:
        pass

    async def close(self) -> None:
        pass
