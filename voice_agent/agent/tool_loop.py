"""One answer with tools: the LLM asks for tools, they run, the LLM goes on.

:class:`ToolLoop` stands in for the LLM of one :class:`~voice_agent.reply.pipeline.Reply`:
to the reply it is a backend that streams text, so the chunker, TTS, pacer and
barge-in work as for any answer. Inside, each round streams the model's text
to the reply and collects its tool calls; the calls run (off the event loop,
with a timeout, :func:`~voice_agent.agent.tools.run_tool`), their results go into the
conversation as ``tool`` messages after the assistant message that asked for
them, and the next round starts. After ``max_rounds`` rounds the model is asked
once more without tools, so it has to answer in words. While a tool runs past
``filler_after_s``, a filler ("One moment while I check that.") is streamed so
the line is not dead.

Interruptions: a tool call is never cancelled with the answer. The call runs
to its end (bounded by its timeout) in a task of the session's
:class:`ToolLedger`, and writes its result into its ``tool`` message when it
has one. The assistant message and its ``tool`` messages enter the record
together (:attr:`ToolLoop.messages`), so the history never holds a call
without its result; the next answer waits for results still being computed
(:meth:`ToolLedger.settled`) before it asks the model. A side-effecting tool
called again with the same arguments before an answer was heard to its end
gets its first result instead of running twice. Side-effecting tools of a
held (preemptive) answer wait until the turn is committed: a user who goes on
talking has not asked for them yet.

Limits: an answer makes at most ``max_calls`` calls over its rounds, and a
session at most the ledger's ``max_calls``; a call past either is not run,
and its ``tool`` message says so (the model needs a result for every call it
made). Once no call is left, the next round is asked without tools. The
ledger runs at most ``concurrency`` calls at once (the session's share of the
tool threads, :func:`~voice_agent.agent.tools.run_tool`). Every result is
``screen``ed (the model's markup taken out) before it enters the conversation.

A Realtime client's own functions (:mod:`.client_tools`) are offered beside
the server's but never run here: a round that calls one runs the server's
calls of that round, then yields the client's calls and ends the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..engines.llm.base import LLMBackend, Message, ToolCall
from .client_tools import ToolOffer
from .tools import Tool, ToolOutcome, run_tool

log = logging.getLogger(__name__)

PENDING = '{"status": "running"}'  # a tool message's content until its result is in
ALREADY_DONE = "Already done for this request, not repeated. Its result: "


@dataclass
class ToolRecord:
    """One call as the session report shows it."""

    id: str
    name: str
    arguments: str
    started_at: float  # monotonic
    result: str | None = None
    ok: bool | None = None
    duration_ms: float | None = None
    repeated: bool = False  # a side-effecting call answered from an earlier identical one


class ToolLedger:
    """The tool calls of one session: the ones still running, and side effects already done for the open request."""

    def __init__(
        self,
        context: Any,
        timeout_s: float,
        on_record: Callable[[ToolRecord], None] | None = None,
        *,
        concurrency: int = 2,
        max_calls: int = 100,
        screen: Callable[[str], str] = str,
    ):
        self._context = context
        self._timeout_s = timeout_s
        self._on_record = on_record
        self._share = asyncio.Semaphore(max(1, concurrency))
        self._max_calls = max_calls
        self._screen = screen
        self.calls = 0  # admitted so far
        self._running: set[asyncio.Task] = set()
        self._side_effects: dict[str, asyncio.Task[ToolOutcome]] = {}

    @property
    def calls_left(self) -> int:
        return self._max_calls - self.calls

    def admit(self) -> str | None:
        """Count one more call against the session's limit; why it may not run, if it may not."""
        if self.calls >= self._max_calls:
            return f"this conversation already made {self._max_calls} tool calls, the most it may"
        self.calls += 1
        return None

    def start(self, tool: Tool | None, call: ToolCall, message: Message, refused: str | None = None) -> asyncio.Task:
        """Run ``call`` to its end, whatever happens to the answer; its outcome lands in ``message``.

        A ``refused`` call is not run: its outcome says why."""
        record = ToolRecord(call.id, call.name, call.arguments, time.monotonic())
        key = _side_effect_key(call) if tool is not None and tool.side_effect else None
        earlier = self._side_effects.get(key) if key is not None else None
        if refused is not None:
            task = asyncio.ensure_future(_refusal(call, refused))
        elif earlier is not None:
            record.repeated = True
            task = asyncio.ensure_future(self._repeat(earlier))
        else:
            task = asyncio.ensure_future(self._run(tool, call))
            if key is not None:
                self._side_effects[key] = task
        self._running.add(task)

        def finished(task: asyncio.Task) -> None:
            self._running.discard(task)
            if task.cancelled():
                outcome = ToolOutcome(json.dumps({"error": f"{call.name} was cancelled"}), False, 0.0)
            else:
                outcome = task.result()
            content = self._screen(outcome.content)
            message["content"] = content
            record.result, record.ok, record.duration_ms = content, outcome.ok, outcome.duration_ms
            if self._on_record is not None:
                self._on_record(record)

        task.add_done_callback(finished)
        return task

    async def _run(self, tool: Tool | None, call: ToolCall) -> ToolOutcome:
        if tool is None:
            return ToolOutcome(json.dumps({"error": f"there is no tool named {call.name!r}"}), False, 0.0)
        return await run_tool(tool, call.arguments, self._context, self._timeout_s, self._share)

    @staticmethod
    async def _repeat(earlier: asyncio.Task[ToolOutcome]) -> ToolOutcome:
        outcome = await asyncio.shield(earlier)
        return ToolOutcome(ALREADY_DONE + outcome.content, outcome.ok, 0.0)

    async def settled(self) -> None:
        """Wait for every running call: its result belongs in the history before the model is asked again."""
        while self._running:
            await asyncio.wait(set(self._running))

    def request_done(self) -> None:
        """An answer was heard to its end: the next identical side-effecting call is a new request."""
        self._side_effects.clear()

    async def close(self) -> None:
        """Let running calls finish (each is bounded by its timeout) so their effects are recorded."""
        await self.settled()


async def _refusal(call: ToolCall, reason: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": f"{call.name} was not called: {reason}"}), False, 0.0)


def _side_effect_key(call: ToolCall) -> str:
    try:
        arguments = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        arguments = call.arguments
    return f"{call.name}:{arguments}"


class ToolLoop:
    """The LLM of one answer, with tools; streams only text to its reply."""

    name = "tool-loop"

    def __init__(
        self,
        llm: LLMBackend,
        tools: Sequence[Tool],
        ledger: ToolLedger,
        *,
        max_rounds: int = 4,
        max_calls: int = 8,
        filler_after_s: float = 0.3,
        filler_repeat_s: float = 2.5,
        fillers: Sequence[str] = (),
        committed: asyncio.Event | None = None,
        client_tools: ToolOffer | None = None,
    ):
        self._llm = llm
        self._tools = {t.name: t for t in tools}
        # The client's functions are offered beside the server's; their calls end the answer, handed to the client.
        self._client_names = client_tools.names if client_tools is not None else set()
        self._schemas = [t.schema() for t in tools] + list(client_tools.schemas if client_tools is not None else ())
        self._ledger = ledger
        self._max_rounds = max_rounds
        self._max_calls = max_calls
        self._calls = 0  # this answer's, admitted
        self._filler_after_s = filler_after_s
        self._filler_repeat_s = filler_repeat_s
        self._fillers = list(fillers)
        self._committed = committed
        # The assistant tool-call messages and their tool results of this answer, in order.
        self.messages: list[Message] = []

    async def stream_chat(self, messages: list[Message], tools: Any = None) -> AsyncGenerator[str | ToolCall, None]:
        await self._ledger.settled()
        conversation = list(messages)
        fillers = iter(self._fillers)
        for round_ in range(self._max_rounds + 1):
            calls_left = min(self._max_calls - self._calls, self._ledger.calls_left)
            offered = self._schemas if round_ < self._max_rounds and self._schemas and calls_left > 0 else None
            text: list[str] = []
            calls: list[ToolCall] = []
            stream = self._llm.stream_chat(conversation, tools=offered)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    if isinstance(item, ToolCall):
                        calls.append(item)
                    elif item:
                        text.append(item)
                        yield item
            for_client = [c for c in calls if c.name in self._client_names]
            calls = [c for c in calls if c.name not in self._client_names]
            if not calls:
                for call in for_client:
                    yield call
                return
            if self._committed is not None and any(self._is_side_effect(c) for c in calls):
                await self._committed.wait()
            assistant: Message = {
                "role": "assistant",
                "content": "".join(text) or None,  # null, as OpenAI writes a message that only calls tools
                "tool_calls": [c.as_message_part() for c in calls],
            }
            results: list[Message] = [{"role": "tool", "tool_call_id": c.id, "content": PENDING} for c in calls]
            running = [
                self._ledger.start(self._tools.get(c.name), c, m, self._admit())
                for c, m in zip(calls, results, strict=True)
            ]
            self.messages += [assistant, *results]
            conversation += [assistant, *results]
            async for filler in self._wait(running, fillers):
                yield filler
            if for_client:  # after the server's calls of the same round, whose results are in the history first
                for call in for_client:
                    yield call
                return

    def _admit(self) -> str | None:
        """Count one more call of this answer; why it may not run, if it may not."""
        if self._calls >= self._max_calls:
            return f"this answer already made {self._max_calls} tool calls, the most one answer may"
        refused = self._ledger.admit()
        if refused is None:
            self._calls += 1
        return refused

    def _is_side_effect(self, call: ToolCall) -> bool:
        tool = self._tools.get(call.name)
        return tool is not None and tool.side_effect

    async def _wait(self, running: list[asyncio.Task], fillers: Any) -> AsyncGenerator[str, None]:
        """Wait for ``running`` (never cancelling it), yielding a filler each time the wait grows long."""
        wait_s = self._filler_after_s
        while True:
            # asyncio.wait neither cancels the calls on its timeout nor when this answer is cancelled.
            _, pending = await asyncio.wait(running, timeout=wait_s)
            if not pending:
                return
            filler = next(fillers, None)
            if filler is None:
                await asyncio.wait(running)
                return
            yield filler + " "  # the space lets the chunker release the sentence at once
            wait_s = self._filler_repeat_s
