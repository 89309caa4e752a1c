"""The LLM backend interface.

A backend streams the answer to a chat as text deltas. Aborting is closing
the stream (``aclose()``, or cancelling the task that iterates it): every
backend must then stop generating, so a barge-in frees the engine at once.

Tools (function calling): ``stream_chat(messages, tools=...)`` takes tool
definitions in the OpenAI ``tools`` format. A backend that can call tools
yields a :class:`ToolCall` for each call the model makes, after any text of
that answer; one that cannot ignores ``tools`` and says so in
``supports_tools``. Without ``tools`` a backend yields only text, as before.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol, overload

# {"role": "system" | "user" | "assistant" | "tool", "content": ...}, plus
# "tool_calls" on an assistant message and "tool_call_id" on a tool message.
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str

    def as_message_part(self) -> dict[str, Any]:
        """This call as an entry of an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class PromptTooLong(ValueError):
    """The prompt leaves no room for the answer in the model's context."""


class LLMBackend(Protocol):
    name: str

    @overload
    def stream_chat(self, messages: list[Message]) -> AsyncGenerator[str, None]: ...

    @overload
    def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> AsyncGenerator[str | ToolCall, None]: ...

    def stream_chat(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[str, None] | AsyncGenerator[str | ToolCall, None]:
        """Stream the assistant's reply to ``messages``: text deltas, then the tool calls it makes, if any."""
        ...

    async def prefill(self, messages: list[Message]) -> None:
        """Make a later request that starts with ``messages`` quicker, if the backend can.

        A hint. ``messages`` end with the user's message as far as it is
        known: empty between turns, after the system prompt and history; the
        words so far while the user speaks. A backend without a cache to
        fill in advance returns at once.
        """
        ...

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        """Log probability that the last (user) message of ``messages`` is finished as it stands.

        An optional signal for the turn decision: a backend that cannot read
        the end-of-turn token's probability returns None, and the decision
        falls back to the transcript rules. ``answering``: an answer to
        exactly ``messages`` is being started: a backend that can read the
        probability while evaluating that answer's prompt does so, rather
        than evaluate the prompt twice.
        """
        ...

    async def warm_up(self) -> None:
        """Pay one-time costs (first evaluation, caches) before the first user."""
        ...

    async def close(self) -> None: ...


def supports_tools(llm: object) -> bool:
    """Whether ``llm`` turns a model's tool calls into :class:`ToolCall` items (``supports_tools`` attribute)."""
    return bool(getattr(llm, "supports_tools", False))


class LLMWrapper:
    """A backend around a shared one (one answer's limits or offers): everything but ``stream_chat`` goes to
    the inner backend, and closing the wrapper leaves the shared backend to its owner."""

    def __init__(self, llm: LLMBackend):
        self._llm = llm
        self.name = llm.name

    async def prefill(self, messages: list[Message]) -> None:
        await self._llm.prefill(messages)

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        return await self._llm.end_of_turn_logprob(messages, answering=answering)

    async def warm_up(self) -> None:
        await self._llm.warm_up()

    async def close(self) -> None:
        pass
