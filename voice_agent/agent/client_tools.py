"""Functions a client runs itself (the Realtime protocol's ``tools``): offered to the LLM, handed to the client.

An answer offered the client's functions streams its text as any answer does;
the calls the model makes are collected by its :class:`~voice_agent.reply.pipeline.Reply`
and, once the answer has been said, handed to the client (``FunctionCall``
events) and written into the history: the assistant message that asked for
them, then a ``tool`` message per call, which waits for the client's output.
The client sends each output and asks for a response, and that answer reads
the results. A new answer that begins before an output came (the user spoke
again) closes the calls still open with a note that no result came, so every
prompt stays a valid chat for the LLM; a late output is refused.

The server's own tools (an :class:`~voice_agent.agent.agent.Agent`'s) still run on
the server, in the agent's tool loop, which hands over the client's calls the
same way; the two may not share a name.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.llm.base import LLMBackend, LLMWrapper, Message, ToolCall, supports_tools
from ..printable import printable
from ..protocols.events import AUTO, Error, ToolChoice, ToolSchemas, chosen_name, names_of

WAITING = json.dumps({"status": "waiting for the client's result"})
UNANSWERED = json.dumps({"error": "no result: the conversation went on before the client sent one"})


@dataclass(frozen=True)
class ToolOffer:
    """The client's functions one answer offers the LLM."""

    schemas: ToolSchemas
    choice: ToolChoice = AUTO

    @property
    def names(self) -> set[str]:
        return names_of(self.schemas)


def checked_offer(
    offer: ToolOffer, server_tools: set[str], llm: LLMBackend, event_id: str
) -> tuple[ToolOffer | None, Error | None]:
    """``offer`` as the client declared it, and the error to tell it: no offer if refused."""
    if taken := offer.names & server_tools:
        message = f"the server's own tools are named {', '.join(sorted(taken))}: give yours other names. Ignored"
        return None, Error("tool_name_conflict", message, event_id)
    forced = chosen_name(offer.choice)
    if forced is not None and forced not in offer.names:
        message = f"tool_choice names {printable(forced)}, which is not one of the tools. Ignored"
        return None, Error("invalid_value", message, event_id)
    if offer.schemas and not supports_tools(llm):
        message = (
            f"this server's LLM ({llm.name}) cannot call tools: answers are given without "
            "them. A server run with --llm openai, against an endpoint that returns tool calls, can"
        )
        return offer, Error("tools_unsupported", message, event_id)
    return offer, None


class ClientCalls:
    """The calls handed to the client whose outputs have not come yet, by call id: their ``tool`` messages."""

    def __init__(self) -> None:
        self._waiting: dict[str, Message] = {}
        # An output came since the last answer began: the next response.create goes on with the answer that
        # made the call, as the server's own tool rounds do, rather than being a new text turn.
        self.continuing = False

    def hand_off(self, calls: Sequence[ToolCall]) -> list[Message]:
        """The ``tool`` messages that follow the message making ``calls`` in the history, waiting for outputs."""
        results = [{"role": "tool", "tool_call_id": call.id, "content": WAITING} for call in calls]
        self._waiting.update((call.id, result) for call, result in zip(calls, results, strict=True))
        return results

    def answer(self, call_id: str, output: str) -> bool:
        """Put the client's ``output`` in the history; False if no call ``call_id`` waits for one."""
        result = self._waiting.pop(call_id, None)
        if result is None:
            return False
        result["content"] = output
        self.continuing = True
        return True

    def forget(self, call_ids: set[str]) -> None:
        """Those calls left the history: no output is waited for."""
        for call_id in call_ids:
            self._waiting.pop(call_id, None)

    def close(self) -> None:
        """A new answer begins: the calls without an output get none."""
        self.continuing = False
        for result in self._waiting.values():
            result["content"] = UNANSWERED
        self._waiting.clear()


class ClientToolTurn(LLMWrapper):
    """The LLM of one answer offered the client's functions: its text, then the calls the model makes.

    Only for a backend that can call tools (``supports_tools``), which takes ``tool_choice`` too."""

    def __init__(self, llm: LLMBackend, offer: ToolOffer):
        super().__init__(llm)
        self._offer = offer

    async def stream_chat(self, messages: list[Message], tools: Any = None) -> AsyncGenerator[str | ToolCall, None]:
        llm: Any = self._llm  # OpenAICompatBackend: the one backend that calls tools
        stream = llm.stream_chat(messages, tools=list(self._offer.schemas), tool_choice=self._offer.choice)
        async with contextlib.aclosing(stream):
            async for item in stream:
                yield item
