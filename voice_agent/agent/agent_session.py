"""One session of an :class:`~voice_agent.agent.agent.Agent`: what the session asks of the agent, in one place.

The session calls in at a few points: when the client starts (the start hook,
then the greeting), when it builds an answer (the LLM of that answer: a
:class:`~voice_agent.agent.tool_loop.ToolLoop` when there are tools), when an answer
ends (its tool messages for the history, the answer hook, call control), when
a user turn is committed, and when the session closes (the report and the
end hook). A session without an agent has none of this: no extra work on its
hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, cast

from ..config import Settings
from ..engines.interfaces import TTSBackend
from ..engines.llm.base import LLMBackend, Message, ToolCall, supports_tools
from ..engines.llm.markup import chat_markup
from ..engines.loader import Engines
from ..engines.phrase_cache import PhraseCache, spoken_chunks
from ..log import log_exception
from ..protocols.client_options import PROMPT_OPTIONS
from ..protocols.events import CallEnded, CallTransferred, Error, OutputEvent
from .agent import Agent, CallAction, CallContext, Hook, call_hook
from .call_control import TwilioCalls
from .client_tools import ToolOffer
from .report_delivery import Retention, deliver
from .session_report import SessionRecorder, SessionReport
from .tool_loop import ToolLedger, ToolLoop
from .tools import as_tool

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 15.0  # how long a closing session waits for tool calls still running, to record their results
MIB = 1024 * 1024


async def prepare_agent(agent: Agent, engines: Engines, settings: Settings) -> TTSBackend | None:
    """Once per process, after the engines are warm: say whether the LLM can call the agent's tools, and
    synthesize the fillers; returns the voice the agent's answers use (None: the engine's own)."""
    if agent.tools and not supports_tools(engines.llm):
        log.warning(
            "the agent has tools, but --llm %s cannot call tools (the embedded SmolLM2-135M cannot): "
            "it answers without them. Use --llm openai with a server that returns tool calls, "
            "e.g. vllm serve --enable-auto-tool-choice --tool-call-parser hermes",
            engines.llm.name,
        )
    if not agent.fillers or not supports_tools(engines.llm):
        return None  # no tool call to fill a silence for
    voice = PhraseCache(engines.tts)
    await voice.pin(spoken_chunks(agent.fillers, settings.first_chunk_min_words, settings.first_chunk_phrase_breaks))
    return voice


class UnverifiedCall(Exception):
    pass


class AgentTurn:
    """The LLM of one answer: waits for the start hook, asks with this session's instructions, runs the tools."""

    name = "agent"

    def __init__(self, session: AgentSession, llm: LLMBackend, held: bool, client_tools: ToolOffer | None = None):
        self._session = session
        self._llm = llm
        self._client_tools = client_tools
        self.committed = asyncio.Event()
        if not held:
            self.committed.set()
        self.loop: ToolLoop | None = None

    @property
    def messages(self) -> list[Message]:
        """The tool calls and results of this answer, for the history."""
        return self.loop.messages if self.loop is not None else []

    async def stream_chat(self, messages: list[Message], tools: Any = None) -> AsyncGenerator[str | ToolCall, None]:
        session = self._session
        context = await session.started()  # the start hook may change the instructions and tools
        if messages and messages[0].get("role") == "system":
            messages = [{"role": "system", "content": context.instructions}, *messages[1:]]
        if session.tools_enabled and (context.tools or self._client_tools is not None):
            self.loop = ToolLoop(
                self._llm,
                context.tools,
                session.ledger,
                client_tools=self._client_tools,
                max_rounds=session.settings.tool_max_rounds,
                max_calls=session.settings.tool_max_calls_per_answer,
                filler_after_s=session.settings.tool_filler_ms / 1000.0,
                filler_repeat_s=session.settings.tool_filler_repeat_ms / 1000.0,
                fillers=session.agent.fillers,
                committed=self.committed,
            )
            stream: AsyncGenerator[str | ToolCall, None] = self.loop.stream_chat(messages)
        else:
            stream = self._llm.stream_chat(messages)
        async with contextlib.aclosing(stream):
            async for delta in stream:
                yield delta


class AgentSession:
    def __init__(
        self,
        agent: Agent,
        settings: Settings,
        session_id: str,
        emit: Callable[[OutputEvent], None],
        llm: LLMBackend,
        protocol: str = "ws",
        tts: TTSBackend | None = None,
    ):
        self.agent = agent
        self.settings = settings
        self.session_id = session_id
        self.protocol = protocol
        self.tts = tts  # the voice of this agent's answers: the engine's, with the fillers cached
        self._emit = emit
        self.tools_enabled = supports_tools(llm)
        self._markup = chat_markup(llm)
        self._hook_timeout_s = settings.agent_hook_timeout_s if settings.agent_hook_timeout_s > 0 else None
        self.context: CallContext | None = None
        self._start: asyncio.Task[CallContext] | None = None
        self.recorder = SessionRecorder(
            session_id,
            protocol,
            recording_dir=settings.session_report_dir if settings.record else "",
            max_recording_bytes=round(settings.record_max_mb * MIB),
        )
        self.ledger = self._ledger(None)
        self._turns: dict[int, AgentTurn] = {}
        self._action: asyncio.Task | None = None
        self._hooks: set[asyncio.Task] = set()  # hooks running in the background, referenced until done
        self._end_reason = "the client hung up, or a limit or shutdown closed it"
        # Twilio's REST API acts only on a call the stream was issued for (call_tokens.py), never on a claimed one.
        self._call_verified = False

    def recorded(self, emit: Callable[[OutputEvent], None]) -> Callable[[OutputEvent], None]:
        """``emit``, with every event shown to this session's recorder first."""

        def emit_recorded(event: OutputEvent) -> None:
            self.recorder.observe_output(event)
            emit(event)

        return emit_recorded

    # Start.

    def begin(self, options: dict[str, Any], on_started: Callable[[CallContext], None] | None) -> None:
        """Run the start hook once, with the client's start options; then ``on_started`` (which says the greeting)."""
        if self._start is not None:
            return
        call_id = options.get("call_id") if isinstance(options.get("call_id"), str) else None
        self.recorder.call_id = call_id
        self._call_verified = options.get("call_verified") is True
        # The call's custom parameters (the other fields of a native start) beside the screened options:
        # a prompt or greeting among them stays there, refused, unless the start hook takes it.
        parameters = options.get("custom_parameters")
        visible = {k: v for k, v in (parameters or {}).items() if k not in PROMPT_OPTIONS}
        visible.update(options)
        context = self.agent.context(self.session_id, self.protocol, visible, call_id)
        self.ledger = self._ledger(context)
        self._start = asyncio.create_task(self._run_start(context, on_started))

    def _ledger(self, context: CallContext | None) -> ToolLedger:
        settings = self.settings
        return ToolLedger(
            context,
            settings.tool_timeout_s,
            self.recorder.tool_call,
            concurrency=settings.tool_concurrency,
            max_calls=settings.tool_max_calls_per_session,
            screen=self._markup.screen,
        )

    async def _run_start(self, context: CallContext, on_started: Callable[[CallContext], None] | None) -> CallContext:
        await self._hook(self.agent.on_session_start, context)
        # The hook may have copied a caller's words (a call's custom parameters) into them: no markup reaches the model.
        instructions, greeting = self._markup.screen(context.instructions), self._markup.screen(context.greeting)
        if (instructions, greeting) != (context.instructions, context.greeting):
            log.warning("session %s: chat-template markup taken out of the instructions or greeting", self.session_id)
            context.instructions, context.greeting = instructions, greeting
        self.context = context
        if on_started is not None:
            on_started(context)
        return context

    async def started(self) -> CallContext:
        if self._start is None:
            self.begin({}, None)  # the client sent no start: its first words start the session
        assert self._start is not None
        return await asyncio.shield(self._start)

    @property
    def instructions(self) -> str:
        return self.context.instructions if self.context is not None else self.agent.instructions

    # Answers.

    def llm(self, llm: LLMBackend, turn: int, held: bool, client_tools: ToolOffer | None = None) -> LLMBackend:
        """The LLM for the answer to ``turn``; ``held`` answers run side-effecting tools only once :meth:`release`d.

        ``client_tools``: the client's functions, offered beside the agent's; their calls go to the client."""
        agent_turn = AgentTurn(self, llm, held, client_tools)
        self._turns[turn] = agent_turn
        return cast(LLMBackend, agent_turn)  # a reply only streams from it

    def tool_names(self) -> set[str]:
        """The names of the agent's tools in this session (its start hook may have changed them)."""
        tools = self.context.tools if self.context is not None else [as_tool(t) for t in self.agent.tools]
        return {tool.name for tool in tools}

    def sentence_limit(self, limit: int) -> int:
        """``--answer-max-sentences`` for an answer that may call tools: none. Its fillers are sentences too,
        and an answer about a tool's result (a booking and its reference) is longer than a chat reply."""
        tools = self.context.tools if self.context is not None else self.agent.tools
        return 0 if self.tools_enabled and tools else limit

    def release(self, turn: int) -> None:
        """The answer to ``turn`` is the one the user hears now."""
        if (agent_turn := self._turns.get(turn)) is not None:
            agent_turn.committed.set()

    def user_turn(self, text: str, speech: tuple[float, float] | None = None) -> None:
        """A user turn was committed; a spoken one's ``speech`` starts and ends there in the session's audio (s)."""
        if self.context is not None:
            self._in_background(self._hook(self.agent.on_user_turn, self.context, text))
        if speech is not None:
            self.recorder.user_speech(*speech)

    def answer_ended(self, turn: int, heard: str, interrupted: bool) -> list[Message]:
        """An answer ended: run the hook and any call control it asked for; returns its tool messages for the history."""
        agent_turn = self._turns.pop(turn, None)
        for old in [t for t in self._turns if t < turn]:
            del self._turns[old]  # answers of turns that were dropped
        context = self.context
        if context is not None and turn > 0:
            self._in_background(self._hook(self.agent.on_answer, context, heard, interrupted))
        if not interrupted and turn > 0:  # fixed words (a greeting, an apology) answer no request
            self.ledger.request_done()
        if context is not None and context.action is not None:
            action, context.action = context.action, None
            if interrupted:
                log.info("session %s: %s dropped: the user interrupted", self.session_id, action.kind)
            else:
                self._action = asyncio.create_task(self._carry_out(action, context))
        return agent_turn.messages if agent_turn is not None else []

    async def _hook(self, hook: Hook | None, *args: Any) -> None:
        await call_hook(hook, *args, timeout_s=self._hook_timeout_s)

    def _in_background(self, hook: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(hook)
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    async def _carry_out(self, action: CallAction, context: CallContext) -> None:
        """End or transfer the call, now that the answer that announced it has been spoken.

        On a Twilio stream whose call is not verified, ending closes the stream (which ends a call that
        ``<Connect>`` bridged) and a transfer cannot be made."""
        call_sid = context.call_id if self.protocol == "twilio" and self._call_verified else None
        try:
            if self.protocol == "twilio" and not call_sid and action.kind == "transfer":
                raise UnverifiedCall("a transfer needs a call answered through POST /twilio/voice")
            if call_sid:
                calls = TwilioCalls(self.settings.twilio_api_url)
                if action.kind == "end":
                    await calls.hang_up(call_sid)
                else:
                    await calls.transfer(call_sid, action.to)
        except UnverifiedCall as exc:
            log.warning("session %s: %s", self.session_id, exc)
            self._emit(Error("call_control_failed", f"{action.kind} failed: {exc}"))
        except Exception:
            log_exception(log, "session %s: Twilio call control failed", self.session_id)
            self._emit(Error("call_control_failed", f"{action.kind} failed on the server"))
        if action.kind == "transfer":
            self._emit(CallTransferred(action.to))
        else:
            self._end_reason = (
                f"the agent ended the call: {action.reason}" if action.reason else "the agent ended the call"
            )
            self._emit(CallEnded(action.reason))

    # End.

    async def close(self) -> SessionReport:
        """Wait briefly for tool calls still running, then deliver the report and run the end hook."""
        try:
            await asyncio.wait_for(self.ledger.close(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("session %s: tool calls still running at close", self.session_id)
        if self._action is not None:
            await asyncio.gather(self._action, return_exceptions=True)
        await asyncio.gather(*self._hooks, return_exceptions=True)
        report = self.recorder.finish(self._end_reason)
        if report.empty:
            log.debug("session %s: nothing was said or answered; no report", self.session_id)
        else:
            retention = Retention(
                self.settings.session_report_max_files, round(self.settings.session_report_max_mb * MIB)
            )
            deliver(report, self.settings.session_report_dir, self.settings.session_report_url, retention)
        context = self.context or self.agent.context(self.session_id, self.protocol, {}, None)
        await self._hook(self.agent.on_session_end, context, report)
        return report
