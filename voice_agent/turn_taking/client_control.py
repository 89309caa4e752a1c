"""What a client controls itself: its start options, and the Realtime protocol's settings, buffer and responses.

At the start a client may set the prompt and a greeting (an agent's start
hook decides instead where there is one). A Realtime client may change its
own copy of the server's settings (session.update), commit or clear the audio
it sent (manual turn taking), add text, ask for a response or cancel it, and
declare functions it runs itself (client_tools.py); what it does to the
conversation's items is :mod:`..agent.conversation_items`'. Turn taking and
the answer's life stay the session's and its floor's: this holds what the
client asked for and calls the session to act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..agent.agent_session import AgentSession
from ..agent.client_tools import ToolOffer
from ..agent.conversation import Conversation
from ..agent.conversation_items import CONVERSATION_ITEM_EVENTS, ConversationItems
from ..agent.reply_factory import ReplyFactory, TurnMetrics
from ..audio import PIPELINE_RATE
from ..config import Settings
from ..engines.llm.base import Message, supports_tools
from ..engines.loader import Engines
from ..engines.stt_queue import SessionSTT
from ..log import log_exception
from ..printable import printable
from ..protocols.events import (
    AUTO,
    CLIENT_CANCELLED,
    TURN_DETECTED,
    Error,
    FunctionCallOutput,
    HistoryMessage,
    IdleTimeout,
    InputClear,
    InputCleared,
    InputCommit,
    InputEvent,
    ItemDelete,
    ItemRetrieve,
    OutputEvent,
    ResponseCancel,
    ResponseRequest,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
    ToolChoice,
    ToolSchemas,
    Transcript,
    TruncateRequest,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
    UserText,
    UserTextAdded,
    chosen_name,
)
from ..reply.pipeline import Reply
from .answer import Answer
from .listener import Listener
from .turn import has_words
from .turn_detection import turn_taking
from .user_turn import UserTurn

if TYPE_CHECKING:
    from ..agent.agent import CallContext

log = logging.getLogger(__name__)

CLIENT_CONTROL_EVENTS = (
    SessionUpdate,
    InputCommit,
    InputClear,
    UserText,
    ResponseRequest,
    ResponseCancel,
    TruncateRequest,
    FunctionCallOutput,
    HistoryMessage,
    ItemRetrieve,
    ItemDelete,
)


class ControlledSession(Protocol):
    """What a client's own requests read and change of the session, and how they start and stop answers."""

    id: str
    settings: Settings
    engines: Engines
    clock: Callable[[], float]
    stt: SessionSTT
    listener: Listener
    conversation: Conversation
    replies: ReplyFactory
    agent: AgentSession | None
    closed: bool
    emit: Callable[[OutputEvent], None]

    @property
    def answer(self) -> Answer | None: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def answering(self) -> bool: ...

    @property
    def history(self) -> list[Message]: ...

    def say(self, text: str) -> None: ...

    def commit(self, turn: UserTurn) -> None: ...

    def interrupt(self, reason: str = TURN_DETECTED) -> None: ...

    def start_answer(
        self, run: Callable[[Answer], Coroutine[Any, Any, None]], turn: UserTurn | None = None
    ) -> None: ...

    async def play(self, answer: Answer, reply: Reply, running: asyncio.Task) -> None: ...


class ClientControl:
    def __init__(self, session: ControlledSession, settings: Settings):
        self._session = session
        # session.update changes a copy of the server's settings, so other sessions never see it.
        self._server_settings = settings
        self.voice = Path(getattr(session.engines.tts, "voice_path", "")).name.removesuffix(".onnx")
        self.turn_detection = turn_taking(settings, TurnDetection()).in_effect
        self._inputs: list[asyncio.Future[str]] = []  # user input not answered yet: text, committed turns
        self.tools: ToolSchemas = ()  # the client's functions (client_tools.py), and how the LLM may choose them
        self.tool_choice: ToolChoice = AUTO
        self.items = ConversationItems(session.conversation, session.emit)
        self.calls = self.items.calls
        self._idle: asyncio.TimerHandle | None = None  # idle_timeout_ms: the wait for the user after an answer

    def start(self, event: SessionStarted) -> None:
        """The client's start options: the sample rate, and a prompt and greeting unless an agent decides them."""
        session = self._session
        session.listener.set_sample_rate(event.sample_rate)
        if event.options.get("echo_cancelled") is True:
            session.listener.client_cancels_echo()
        if session.agent is not None:  # the agent's start hook decides what the client may change
            session.agent.begin(event.options, self._agent_started)
            return
        prompt = event.options.get("system_prompt")
        if isinstance(prompt, str) and prompt.strip():
            session.conversation.system_prompt = prompt.strip()
        greeting = event.options.get("greeting")
        if isinstance(greeting, str) and greeting.strip():
            session.say(greeting.strip())

    def _agent_started(self, context: CallContext) -> None:
        """The agent's start hook has decided this session's instructions and greeting."""
        session = self._session
        session.conversation.system_prompt = context.instructions
        # The hook runs off the event loop: a user who spoke or typed meanwhile is not cut off by the greeting.
        spoken_to = session.answering or session.history or session.listener.turn is not None
        if context.greeting.strip() and not spoken_to:
            session.say(context.greeting.strip())

    def handle(self, event: InputEvent) -> None:
        """One of ``CLIENT_CONTROL_EVENTS``."""
        if isinstance(event, SessionUpdate):
            self._on_update(event)
        elif isinstance(event, InputCommit):
            self._on_commit_request(event)
        elif isinstance(event, InputClear):
            self._session.listener.clear()
            self._session.emit(InputCleared())
        elif isinstance(event, UserText):
            self._on_text(event)
        elif isinstance(event, ResponseRequest):
            self._on_response_request(event)
        elif isinstance(event, ResponseCancel):
            self._on_cancel(event)
        elif isinstance(event, CONVERSATION_ITEM_EVENTS):
            self.items.handle(event, self._inputs)

    def _on_text(self, event: UserText) -> None:
        """Typed text waits for a response: a bounded number of items, and of characters, so a client cannot
        pile up work (and memory) the next answer would take all at once."""
        settings = self._server_settings
        if 0 < settings.max_pending_items <= len(self._inputs):
            message = f"{len(self._inputs)} items already wait for a response; ask for one first. Ignored"
            self._session.emit(Error("too_many_pending_items", message, event.event_id))
            return
        waiting = sum(len(item.result()) for item in self._ready())
        if 0 < settings.max_pending_chars < waiting + len(event.text):
            message = f"over {settings.max_pending_chars} characters of text would wait for a response. Ignored"
            self._session.emit(Error("pending_text_too_long", message, event.event_id))
            return
        self.items.text_added(event.item_id, self.add_input(event.text))
        self._session.emit(UserTextAdded(event.text, event.item_id))

    def _ready(self) -> list[asyncio.Future[str]]:
        """User input waiting for an answer whose words are known already."""
        return [item for item in self._inputs if item.done() and not item.cancelled() and item.exception() is None]

    def add_input(self, text: str) -> asyncio.Future[str]:
        """User words the client will ask a response to (typed text, a turn it answers itself)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.set_result(text)
        self._inputs.append(future)
        return future

    def take_ready_input(self) -> str:
        """The words of user input waiting for an answer that are known already, taken off the queue."""
        ready = self._ready()
        self._inputs = [item for item in self._inputs if item not in ready]
        return " ".join(t for t in (item.result() for item in ready) if has_words(t))

    def close(self) -> None:
        self.user_speaks()
        for item in self._inputs:
            item.cancel()

    def answer_begins(self) -> None:
        """A new answer begins: the client's calls still without an output get none, and no idle wait runs."""
        self.calls.close()
        self.user_speaks()

    def answer_done(self) -> None:
        """An answer was heard to its end: with ``idle_timeout_ms``, the agent speaks again after that much silence."""
        timeout_ms = self.turn_detection.idle_timeout_ms
        if timeout_ms:
            self.user_speaks()
            self._idle = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._idle_timed_out)

    def user_speaks(self) -> None:
        """Speech began (or the session ends): the idle wait is over."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_timed_out(self) -> None:
        self._idle = None
        session = self._session
        if session.closed or session.answer is not None or session.listener.turn is not None:
            return
        session.emit(IdleTimeout(session.listener.timeline.received * 1000 // PIPELINE_RATE))
        if self.turn_detection.create_response:  # the agent prompts the user, from the history as it stands
            inputs, self._inputs = self._inputs, []
            session.start_answer(lambda answer: self._answer_request(answer, inputs, ResponseRequest(), None))

    def _on_update(self, event: SessionUpdate) -> None:
        session = self._session
        if event.sample_rate is not None and event.sample_rate != session.sample_rate:
            session.listener.set_sample_rate(event.sample_rate)
        if event.instructions is not None:
            session.conversation.system_prompt = event.instructions
        if event.voice is not None and event.voice != self.voice:
            message = f"unknown voice {printable(event.voice)}; this server has {self.voice!r}, which the session keeps"
            session.emit(Error("invalid_voice", message, event.event_id))
        if event.turn_detection is not None:
            self._set_turn_detection(event.turn_detection)
        if event.max_output_tokens is not None:
            session.replies.max_output_tokens = event.max_output_tokens
        if event.noise_suppression is not None:
            session.listener.suppress_noise(event.noise_suppression)
        if event.tools is not None or event.tool_choice is not None:
            offer = self._tool_offer(event.tools, event.tool_choice, event.event_id)
            if offer is not None:
                self.tools, self.tool_choice = offer.schemas, offer.choice
                session.replies.tools = offer if offer.schemas else None
        session.emit(
            SessionConfig(
                session.conversation.system_prompt,
                self.voice,
                self.turn_detection,
                session.replies.max_output_tokens,
                session.sample_rate,
                self.tools,
                self.tool_choice,
                session.listener.noise_suppression,
            )
        )

    def _tool_offer(self, tools: ToolSchemas | None, choice: ToolChoice | None, event_id: str) -> ToolOffer | None:
        """The client's functions, with what it left out as the session has it; None, and an error, if refused."""
        session = self._session
        offer = ToolOffer(self.tools if tools is None else tools, self.tool_choice if choice is None else choice)
        taken = offer.names & session.agent.tool_names() if session.agent is not None else set()
        if taken:
            message = f"the server's own tools are named {', '.join(sorted(taken))}: give yours other names. Ignored"
            session.emit(Error("tool_name_conflict", message, event_id))
            return None
        forced = chosen_name(offer.choice)
        if forced is not None and forced not in offer.names:
            message = f"tool_choice names {printable(forced)}, which is not one of the tools. Ignored"
            session.emit(Error("invalid_value", message, event_id))
            return None
        if offer.schemas and not supports_tools(session.engines.llm):
            message = (
                f"this server's LLM ({session.engines.llm.name}) cannot call tools: answers are given without "
                "them. A server run with --llm openai, against an endpoint that returns tool calls, can"
            )
            session.emit(Error("tools_unsupported", message, event_id))
        return offer

    def _set_turn_detection(self, detection: TurnDetection) -> None:
        taking = turn_taking(self._server_settings, detection)
        self._session.settings = taking.settings
        self._session.listener.configure(taking.settings, taking.preroll_samples, taking.manual)
        self.turn_detection = taking.in_effect

    def _on_commit_request(self, event: InputCommit) -> None:
        session = self._session
        listener = session.listener
        if not listener.manual:
            if listener.turn is None:
                session.emit(Error("input_audio_buffer_commit_empty", "no speech to commit", event.event_id))
            else:
                session.commit(listener.turn)
            return
        span = listener.take_buffer()
        if span is None:
            message = "the input audio buffer holds less than 100 ms of audio"
            session.emit(Error("input_audio_buffer_commit_empty", message, event.event_id))
            return
        turn_id = next(listener.turn_ids)
        session.emit(TurnCommitted(turn_id, span[1] * 1000 // PIPELINE_RATE))
        audio = listener.timeline.slice(*span)
        self._inputs.append(asyncio.create_task(self._transcribe_committed(turn_id, audio)))

    async def _transcribe_committed(self, turn_id: int, audio: np.ndarray) -> str:
        """The words of a turn the client committed; they are answered when it asks for a response."""
        session = self._session
        try:
            text = await session.stt.committed(audio)
        except Exception:
            log_exception(log, "session %s: transcription failed", session.id)
            session.emit(Error("stt_failed", "transcription failed on the server"))
            text = ""
        if text is None:  # the client's next commit came before Whisper read this one: it reads both
            session.emit(TurnIgnored(turn_id, merged=True))
            return ""
        if has_words(text):
            session.emit(Transcript("user", text, final=True))
        else:
            session.emit(TurnIgnored(turn_id))
        return text

    def _on_response_request(self, event: ResponseRequest) -> None:
        if self._session.answer is not None:
            message = "a response is in progress; cancel it or wait for response.done"
            self._session.emit(Error("conversation_already_has_active_response", message, event.event_id))
            return
        offer = None
        if event.tools is not None or event.tool_choice is not None:
            if (offer := self._tool_offer(event.tools, event.tool_choice, event.event_id)) is None:
                return
        inputs, self._inputs = self._inputs, []
        self._session.start_answer(lambda answer: self._answer_request(answer, inputs, event, offer))

    async def _answer_request(
        self, answer: Answer, inputs: list[asyncio.Future[str]], request: ResponseRequest, tools: ToolOffer | None
    ):
        session = self._session
        metrics = TurnMetrics(next(session.listener.turn_ids), speech_end=session.clock())
        texts = []
        for item in inputs:
            with contextlib.suppress(Exception):  # a failed transcription was reported already
                texts.append(await item)
        text = " ".join(t for t in texts if has_words(t))
        messages = session.conversation.messages_for(text, request.instructions)
        reply = session.replies.new(
            metrics.turn,
            text,
            session.engines.llm,
            messages,
            metrics,
            max_tokens=request.max_output_tokens,
            tools=tools,
        )
        await session.play(answer, reply, asyncio.create_task(reply.run()))

    def _on_cancel(self, event: ResponseCancel) -> None:
        if self._session.answer is None:
            self._session.emit(Error("response_cancel_not_active", "there is no response to cancel", event.event_id))
            return
        self._session.interrupt(CLIENT_CANCELLED)
