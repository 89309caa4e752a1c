"""What a client controls itself: its start options, and the Realtime protocol's settings, buffer and responses.

A client may set the prompt and a greeting at the start (unless an agent's
start hook decides them), change its own copy of the settings, commit or clear
its audio, ask for a response or cancel it, and declare its own functions; the
conversation's items are :mod:`..agent.conversation_items`'. It acts through
the parts and the few session calls it is handed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..agent.agent_session import AgentSession
from ..agent.client_tools import ToolOffer, checked_offer
from ..agent.conversation import Conversation
from ..agent.conversation_items import CONVERSATION_ITEM_EVENTS, ConversationItems
from ..agent.reply_factory import ReplyFactory, TurnMetrics
from ..audio import PIPELINE_RATE
from ..config import Settings
from ..engines.loader import Engines
from ..engines.stt_queue import SessionSTT
from ..log import log_exception
from ..printable import printable
from ..protocols.events import (
    AUTO,
    CLIENT_CANCELLED,
    Error,
    IdleTimeout,
    InputClear,
    InputCleared,
    InputCommit,
    InputEvent,
    OutputEvent,
    ResponseCancel,
    ResponseRequest,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
    ToolChoice,
    ToolSchemas,
    Transcript,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
)
from ..reply.pipeline import Reply
from .answer import Answer
from .floor import Floor, Yield
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
    ResponseRequest,
    ResponseCancel,
    *CONVERSATION_ITEM_EVENTS,
)


class ClientControl:
    def __init__(
        self,
        settings: Settings,
        engines: Engines,
        listener: Listener,
        stt: SessionSTT,
        conversation: Conversation,
        replies: ReplyFactory,
        floor: Floor,
        emit: Callable[[OutputEvent], None],
        agent: AgentSession | None,
        say: Callable[[str], None],
        commit: Callable[[UserTurn], None],
        start_answer: Callable[[Callable[[Answer], Coroutine[Any, Any, None]]], None],
        play: Callable[[Answer, Reply, asyncio.Task], Coroutine[Any, Any, None]],
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        # session.update changes a copy of the server's settings, the listener's: other sessions never see it.
        self._server_settings = settings
        self._engines, self._listener, self._stt, self._conversation = engines, listener, stt, conversation
        self._replies, self._floor, self._emit, self._agent = replies, floor, emit, agent
        self._id, self._clock = session_id, clock
        self._say, self._commit, self._start_answer, self._play = say, commit, start_answer, play
        self.voice = Path(getattr(engines.tts, "voice_path", "")).name.removesuffix(".onnx")
        self.turn_detection = turn_taking(settings, TurnDetection()).in_effect
        self.tools: ToolSchemas = ()  # the client's functions (client_tools.py), and how the LLM may choose them
        self.tool_choice: ToolChoice = AUTO
        self.items = ConversationItems(conversation, emit, settings)
        self.calls = self.items.calls

    def start(self, event: SessionStarted) -> None:
        """The client's start options: the sample rate, and a prompt and greeting unless an agent decides them."""
        self._listener.set_sample_rate(event.sample_rate)
        if event.options.get("echo_cancelled") is True:
            self._listener.client_cancels_echo()
        if self._agent is not None:  # the agent's start hook decides what the client may change
            self._agent.begin(event.options, self._agent_started)
            return
        prompt = event.options.get("system_prompt")
        if isinstance(prompt, str) and prompt.strip():
            self._conversation.system_prompt = prompt.strip()
        greeting = event.options.get("greeting")
        if isinstance(greeting, str) and greeting.strip():
            self._say(greeting.strip())

    def _agent_started(self, context: CallContext) -> None:
        """The agent's start hook has decided this session's instructions and greeting."""
        self._conversation.system_prompt = context.instructions
        # The hook runs off the event loop: a user who spoke or typed meanwhile is not cut off by the greeting.
        spoken_to = self._floor.answer is not None or self._conversation.history or self._listener.turn is not None
        if context.greeting.strip() and not spoken_to:
            self._say(context.greeting.strip())

    def handle(self, event: InputEvent) -> None:
        """One of ``CLIENT_CONTROL_EVENTS``."""
        if isinstance(event, SessionUpdate):
            self._on_update(event)
        elif isinstance(event, InputCommit):
            self._on_commit_request(event)
        elif isinstance(event, InputClear):
            self._listener.clear()
            self._emit(InputCleared())
        elif isinstance(event, ResponseRequest):
            self._on_response_request(event)
        elif isinstance(event, ResponseCancel):
            if self._floor.answer is None:
                self._emit(Error("response_cancel_not_active", "there is no response to cancel", event.event_id))
            else:
                self._floor.transition(Yield(CLIENT_CANCELLED))
        elif isinstance(event, CONVERSATION_ITEM_EVENTS):
            self.items.handle(event)

    def take_ready_input(self) -> str:
        """The words of user input waiting for an answer that are known already, taken off the queue."""
        return " ".join(text for text in self.items.take_ready() if has_words(text))

    def close(self) -> None:
        self.items.close()

    def answer_begins(self) -> None:
        """A new answer begins: the client's calls still without an output get none."""
        self.calls.close()

    def idle(self) -> None:
        """The user said nothing for ``idle_timeout_ms`` after an answer: the agent prompts them, from the history
        as it stands."""
        if self._floor.answer is None and self._listener.turn is None:
            self._emit(IdleTimeout(self._listener.timeline.received * 1000 // PIPELINE_RATE))
            if self.turn_detection.create_response:
                self._respond(ResponseRequest(), None)

    def _on_update(self, event: SessionUpdate) -> None:
        listener, replies = self._listener, self._replies
        if event.sample_rate is not None and event.sample_rate != listener.sample_rate:
            listener.set_sample_rate(event.sample_rate)
        if event.instructions is not None:
            self._conversation.system_prompt = event.instructions
        if event.voice is not None and event.voice != self.voice:
            message = f"unknown voice {printable(event.voice)}; this server has {self.voice!r}, which the session keeps"
            self._emit(Error("invalid_voice", message, event.event_id))
        if event.turn_detection is not None:
            taking = turn_taking(self._server_settings, event.turn_detection)
            self.turn_detection = taking.in_effect
            listener.configure(taking.settings, taking.preroll_samples, taking.manual)
        if event.max_output_tokens is not None:
            replies.max_output_tokens = event.max_output_tokens
        if event.noise_suppression is not None:
            listener.suppress_noise(event.noise_suppression)
        if event.tools is not None or event.tool_choice is not None:
            offer = self._tool_offer(event.tools, event.tool_choice, event.event_id)
            if offer is not None:
                self.tools, self.tool_choice = offer.schemas, offer.choice
                replies.tools = offer if offer.schemas else None
        self._emit(
            SessionConfig(
                self._conversation.system_prompt,
                self.voice,
                self.turn_detection,
                replies.max_output_tokens,
                listener.sample_rate,
                self.tools,
                self.tool_choice,
                listener.noise_suppression,
            )
        )

    def _tool_offer(self, tools: ToolSchemas | None, choice: ToolChoice | None, event_id: str) -> ToolOffer | None:
        """The client's functions, with what it left out as the session has it; None, and an error, if refused."""
        offer = ToolOffer(self.tools if tools is None else tools, self.tool_choice if choice is None else choice)
        server_tools = self._agent.tool_names() if self._agent is not None else set()
        checked, error = checked_offer(offer, server_tools, self._engines.llm, event_id)
        if error is not None:
            self._emit(error)
        return checked

    def _on_commit_request(self, event: InputCommit) -> None:
        listener = self._listener
        if not listener.manual:
            if listener.turn is None:
                self._emit(Error("input_audio_buffer_commit_empty", "no speech to commit", event.event_id))
            else:
                self._commit(listener.turn)
            return
        span = listener.take_buffer()
        if span is None:
            message = "the input audio buffer holds less than 100 ms of audio"
            self._emit(Error("input_audio_buffer_commit_empty", message, event.event_id))
            return
        turn_id = next(listener.turn_ids)
        self._emit(TurnCommitted(turn_id, span[1] * 1000 // PIPELINE_RATE))
        audio = listener.timeline.slice(*span)
        self.items.wait(asyncio.create_task(self._transcribe_committed(turn_id, audio)))

    async def _transcribe_committed(self, turn_id: int, audio: np.ndarray) -> str:
        """The words of a turn the client committed; they are answered when it asks for a response."""
        try:
            text = await self._stt.committed(audio)
        except Exception:
            log_exception(log, "session %s: transcription failed", self._id)
            self._emit(Error("stt_failed", "transcription failed on the server"))
            text = ""
        if text is None:  # the client's next commit came before Whisper read this one: it reads both
            self._emit(TurnIgnored(turn_id, merged=True))
            return ""
        if has_words(text):
            self._emit(Transcript("user", text, final=True))
        else:
            self._emit(TurnIgnored(turn_id))
        return text

    def _on_response_request(self, event: ResponseRequest) -> None:
        if self._floor.answer is not None:
            message = "a response is in progress; cancel it or wait for response.done"
            self._emit(Error("conversation_already_has_active_response", message, event.event_id))
            return
        offer = None
        if event.tools is not None or event.tool_choice is not None:
            if (offer := self._tool_offer(event.tools, event.tool_choice, event.event_id)) is None:
                return
        self._respond(event, offer)

    def _respond(self, request: ResponseRequest, tools: ToolOffer | None) -> None:
        inputs = self.items.take_waiting()
        self._start_answer(lambda answer: self._answer_request(answer, inputs, request, tools))

    async def _answer_request(
        self, answer: Answer, inputs: list[asyncio.Future[str]], request: ResponseRequest, tools: ToolOffer | None
    ):
        metrics = TurnMetrics(next(self._listener.turn_ids), speech_end=self._clock())
        texts = []
        for item in inputs:
            with contextlib.suppress(Exception):  # a failed transcription was reported already
                texts.append(await item)
        text = " ".join(t for t in texts if has_words(t))
        messages = self._conversation.messages_for(text, request.instructions)
        llm = self._engines.llm
        reply = self._replies.new(
            metrics.turn, text, llm, messages, metrics, max_tokens=request.max_output_tokens, tools=tools
        )
        await self._play(answer, reply, asyncio.create_task(reply.run()))
