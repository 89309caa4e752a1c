"""What a client controls itself: its start options, and the Realtime protocol's settings, buffer and responses.

At the start a client may set the prompt and a greeting (an agent's start
hook decides instead where there is one). A Realtime client may change its own copy of the server's settings (session.update),
commit or clear the audio it sent (manual turn taking), add text, ask for a
response or cancel it, and truncate an answer to what it played. Turn taking
and the answer's life stay the session's: this holds what the client asked for
and calls the session to act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .agent_session import AgentSession
from .answer import Answer
from .audio import PIPELINE_RATE
from .config import Settings
from .conversation import Conversation
from .engines import Engines
from .listener import Listener
from .llm.base import Message
from .log import log_exception
from .protocols.events import (
    Error,
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
    Transcript,
    Truncated,
    TruncateRequest,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
    UserText,
    UserTextAdded,
)
from .reply import Reply
from .reply_factory import ReplyFactory
from .stt_queue import SessionSTT
from .turn import has_words
from .turn_detection import turn_taking
from .user_turn import TurnMetrics, UserTurn

if TYPE_CHECKING:
    from .agent import CallContext

log = logging.getLogger(__name__)

REMEMBERED_ANSWERS = 64  # answers a client may still truncate
CLIENT_CONTROL_EVENTS = (
    SessionUpdate,
    InputCommit,
    InputClear,
    UserText,
    ResponseRequest,
    ResponseCancel,
    TruncateRequest,
)


@dataclass
class _Spoken:
    """An answer a client may truncate to what it played."""

    reply: Reply
    message: Message | None = None  # its message in the history, once remembered
    cut_s: float | None = None  # a truncation that came while it still played


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
    emit: Callable[[OutputEvent], None]
    cancel_reason: str

    @property
    def answer(self) -> Answer | None: ...

    @property
    def sample_rate(self) -> int: ...

    def say(self, text: str) -> None: ...

    def commit(self, turn: UserTurn) -> None: ...

    def interrupt(self) -> None: ...

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
        self._spoken: OrderedDict[int, _Spoken] = OrderedDict()

    def start(self, event: SessionStarted) -> None:
        """The client's start options: the sample rate, and a prompt and greeting unless an agent decides them."""
        session = self._session
        session.listener.set_sample_rate(event.sample_rate)
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
        self._session.conversation.system_prompt = context.instructions
        if context.greeting.strip():
            self._session.say(context.greeting.strip())

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
            self.add_input(event.text)
            self._session.emit(UserTextAdded(event.text))
        elif isinstance(event, ResponseRequest):
            self._on_response_request(event)
        elif isinstance(event, ResponseCancel):
            self._on_cancel(event)
        elif isinstance(event, TruncateRequest):
            self._on_truncate(event)

    def add_input(self, text: str) -> None:
        """User words the client will ask a response to (typed text, a turn it answers itself)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.set_result(text)
        self._inputs.append(future)

    def take_ready_input(self) -> str:
        """The words of user input waiting for an answer that are known already, taken off the queue."""
        ready = [item for item in self._inputs if item.done() and not item.cancelled() and item.exception() is None]
        self._inputs = [item for item in self._inputs if item not in ready]
        return " ".join(t for t in (item.result() for item in ready) if has_words(t))

    def playing(self, number: int, reply: Reply) -> None:
        """Answer ``number`` is the one the user hears: the client may truncate it from now on."""
        self._spoken[number] = _Spoken(reply)
        while len(self._spoken) > REMEMBERED_ANSWERS:
            self._spoken.popitem(last=False)

    def remembered(self, reply: Reply, message: Message) -> None:
        """``reply`` went into the history as ``message``: apply a truncation that came before it did."""
        spoken = next((s for s in reversed(self._spoken.values()) if s.reply is reply), None)
        if spoken is not None:
            spoken.message = message
            if spoken.cut_s is not None and spoken.cut_s < reply.heard_s():
                self._session.conversation.truncate(message, reply.text_until(spoken.cut_s))

    def close(self) -> None:
        for item in self._inputs:
            item.cancel()

    def _on_update(self, event: SessionUpdate) -> None:
        session = self._session
        if event.sample_rate is not None and event.sample_rate != session.sample_rate:
            session.listener.set_sample_rate(event.sample_rate)
        if event.instructions is not None:
            session.conversation.system_prompt = event.instructions
        if event.voice is not None and event.voice != self.voice:
            message = f"unknown voice {event.voice!r}; this server has {self.voice!r}, which the session keeps"
            session.emit(Error("invalid_voice", message, event.event_id))
        if event.turn_detection is not None:
            self._set_turn_detection(event.turn_detection)
        if event.max_output_tokens is not None:
            session.replies.max_output_tokens = event.max_output_tokens
        session.emit(
            SessionConfig(
                session.conversation.system_prompt,
                self.voice,
                self.turn_detection,
                session.replies.max_output_tokens,
                session.sample_rate,
            )
        )

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
        inputs, self._inputs = self._inputs, []
        self._session.start_answer(lambda answer: self._answer_request(answer, inputs, event))

    async def _answer_request(self, answer: Answer, inputs: list[asyncio.Future[str]], request: ResponseRequest):
        session = self._session
        metrics = TurnMetrics(next(session.listener.turn_ids), speech_end=session.clock())
        texts = []
        for item in inputs:
            with contextlib.suppress(Exception):  # a failed transcription was reported already
                texts.append(await item)
        text = " ".join(t for t in texts if has_words(t))
        messages = session.conversation.messages_for(text, request.instructions)
        reply = session.replies.new(
            metrics.turn, text, session.engines.llm, messages, metrics, max_tokens=request.max_output_tokens
        )
        await session.play(answer, reply, asyncio.create_task(reply.run()))

    def _on_cancel(self, event: ResponseCancel) -> None:
        if self._session.answer is None:
            self._session.emit(Error("response_cancel_not_active", "there is no response to cancel", event.event_id))
            return
        self._session.cancel_reason = "client_cancelled"
        self._session.interrupt()

    def _on_truncate(self, event: TruncateRequest) -> None:
        spoken = self._spoken.get(event.response)
        if spoken is None:
            self._session.emit(Error("item_not_found", "that answer is no longer known to the server", event.event_id))
            return
        seconds = event.audio_end_ms / 1000.0
        if seconds > spoken.reply.sent_s + 0.001:
            message = f"audio_end_ms {event.audio_end_ms} is past the {spoken.reply.sent_s * 1000:.0f} ms of audio sent"
            self._session.emit(Error("invalid_value", message, event.event_id))
            return
        text = spoken.reply.text_until(seconds)
        if spoken.message is not None:
            self._session.conversation.truncate(spoken.message, text)
        else:
            spoken.cut_s = seconds
        self._session.emit(Truncated(event.response, event.audio_end_ms, text))
