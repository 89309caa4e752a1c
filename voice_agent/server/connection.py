"""The thin layer between a WebSocket and a session.

It reads messages, hands them to the protocol codec, feeds the resulting
events to the session, and writes what the session emits through the codec
on a single writer task. Nothing here knows a wire format. It also enforces
the per-client limits (message, byte, audio and text-turn rates, idle
timeout, session length) and closes the connection when the server asks it
to (shutdown). Idle time is time without speech: the user's turns and text,
and the agent's answers, keep a session open; audio frames alone do not.

A client that stops reading must not hold its slot: uvicorn (0.52.1 and
later) makes a send wait while the socket's buffers are full, so every send,
flush and close here has a timeout, past which the session ends anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import log as logs
from ..config import Settings
from ..engines.loader import Engines
from ..printable import printable
from ..protocols.events import (
    AudioReceived,
    CallEnded,
    Error,
    HistoryMessage,
    InputEvent,
    OutputEvent,
    ResponseEnded,
    ResponseRequest,
    SpeechStarted,
    StreamRefused,
    TextReceived,
    Transcript,
    UserText,
    UserTextAdded,
)
from ..session import Session
from .close_codes import CloseCode
from .limits import ClientLimits, Deadlines, RateLimit, Slot
from .metrics import ServerMetrics

if TYPE_CHECKING:  # imported when a session serves an agent: the plain server loads none of it
    from ..agent.agent import Agent
    from ..engines.interfaces import TTSBackend

log = logging.getLogger(__name__)

# About 20 s of 20 ms audio frames. A client further behind than this is not
# reading: the session is dropped rather than buffering without bound.
OUTBOX_LIMIT = 1000
# One message waiting this long for room in the socket's buffers: the client has stopped reading.
# Real-time audio never waits more than a network hiccup.
SEND_TIMEOUT_S = 5.0
FLUSH_S = 2.0  # how long a closing session may take to send what it already emitted
CLOSE_S = 2.0  # how long the close frame may wait for room; the session ends either way

# What counts against the text-turn rate: each asks the LLM for an answer, or adds words an answer will take
# (a Realtime client's text and other messages, and response.create; not a response.create after the outputs of its function
# calls, which goes on with the answer that made them, as the server's own tool rounds do).
TEXT_TURNS = (TextReceived, UserText, HistoryMessage, ResponseRequest)

_DEADLINE_CLOSE = {
    Deadlines.IDLE: "idle timeout",
    Deadlines.TOO_LONG: "session time limit reached",
}


class Codec(Protocol):
    @property
    def name(self) -> str: ...  # "ws", "realtime", "twilio", "telnyx": the session report's protocol

    def receive_bytes(self, data: bytes) -> list[InputEvent]: ...

    def receive_text(self, text: str) -> list[InputEvent]: ...

    def send(self, event: OutputEvent) -> str | bytes | list[str] | None: ...


class ClientTooSlow(Exception):
    pass


class Closing(Exception):
    """End the session with this close code and reason."""

    def __init__(self, code: CloseCode, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def run_session(
    websocket: WebSocket,
    codec: Codec,
    engines: Engines,
    settings: Settings,
    slot: Slot | None = None,
    metrics: ServerMetrics | None = None,
    opening: Sequence[InputEvent] = (),
    agent: Agent | None = None,
    agent_voice: TTSBackend | None = None,
    byte_budget: RateLimit | None = None,
) -> None:
    """Serve one accepted WebSocket until either side ends it. ``slot`` comes from the server's registry.

    ``opening`` is what the codec tells the session before the client says anything. ``byte_budget``: the
    client address's, shared with its other connections; None gives this connection one of its own.
    """
    slot = slot or Slot()
    metrics = metrics or ServerMetrics()
    session_id = logs.ensure_session()
    outbox: asyncio.Queue[str | bytes] = asyncio.Queue(OUTBOX_LIMIT)
    overflow = asyncio.Event()
    call_ended = asyncio.Event()
    limits = ClientLimits(settings, data=byte_budget)

    def emit(event: OutputEvent) -> None:
        metrics.observe(event)
        if isinstance(event, (SpeechStarted, UserTextAdded)) or (
            isinstance(event, Transcript) and event.role == "user"
        ):
            limits.deadlines.touch()  # the user spoke (or typed): what keeps a session open
        elif isinstance(event, ResponseEnded):
            limits.deadlines.busy()  # idle time counts from the end of the agent's answer
        if isinstance(event, Transcript) and event.final:
            log.log(logs.words_level(), "session %s: %s: %s", session_id, event.role, printable(event.text, 1000))
        elif isinstance(event, CallEnded):
            call_ended.set()
        message = codec.send(event)
        if message is None:
            return
        try:
            for one in message if isinstance(message, list) else [message]:
                outbox.put_nowait(one)
        except asyncio.QueueFull:
            overflow.set()

    async def write() -> None:
        while True:
            message = await outbox.get()
            send = websocket.send_bytes(message) if isinstance(message, bytes) else websocket.send_text(message)
            try:
                await asyncio.wait_for(send, SEND_TIMEOUT_S)
            except TimeoutError:
                raise ClientTooSlow() from None
            outbox.task_done()

    agent_session = None
    if agent is not None:
        from ..agent.agent_session import AgentSession

        agent_session = AgentSession(
            agent, settings, session_id, emit, engines.llm, codec.name, tts=agent_voice or engines.tts
        )
    session = Session(engines, settings, emit, session_id, agent=agent_session)
    for event in opening:
        session.handle(event)
    slot.answering = lambda: session.answering
    log.info("session %s: connected from %s", session_id, websocket.client)
    writer = asyncio.create_task(write())
    overflow_watch = asyncio.create_task(overflow.wait())
    close_watch = asyncio.create_task(slot.close_requested.wait())
    end_watch = asyncio.create_task(call_ended.wait())
    receive: asyncio.Task | None = None
    try:
        with metrics.session():
            while True:
                if receive is None:
                    receive = asyncio.create_task(websocket.receive())
                done, _ = await asyncio.wait(
                    {receive, writer, overflow_watch, close_watch, end_watch},
                    timeout=limits.deadlines.remaining(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receive in done:
                    message, receive = receive.result(), None
                    if message["type"] == "websocket.disconnect":
                        return
                    _receive_message(message, codec, session, limits, emit)
                    continue
                if overflow_watch in done:
                    raise ClientTooSlow()
                if close_watch in done:
                    raise Closing(slot.close_code, slot.close_reason)
                if end_watch in done:
                    raise Closing(CloseCode.NORMAL_CLOSURE, "call ended")
                if writer in done:
                    writer.result()  # raises the writer's error: ClientTooSlow, or the connection's
                    return
                if session.answering or session.listener.turn is not None:
                    limits.deadlines.busy()  # an answer under way, or the user mid-turn: not idle
                if (expired := limits.deadlines.expired()) is not None:
                    emit(Error(expired, f"{_DEADLINE_CLOSE[expired]}; closing"))
                    raise Closing(CloseCode.NORMAL_CLOSURE, _DEADLINE_CLOSE[expired])
    except Closing as closing:
        log.info("session %s: closing (%d, %s)", session_id, closing.code, closing.reason)
        await _flush(outbox, writer)
        await close_within(websocket, closing.code, closing.reason)
    except ClientTooSlow:
        log.warning("session %s: client is not reading; closing", session_id)
        metrics.errors.labels("client_too_slow").inc()
        await close_within(websocket, CloseCode.POLICY_VIOLATION, "client too slow")
    except (WebSocketDisconnect, OSError) as exc:
        log.info("session %s: connection lost: %s", session_id, exc)
    except Exception:
        # A bug in this one session: end it cleanly, never the server or other sessions.
        log.exception("session %s: internal error; closing", session_id)
        metrics.errors.labels("internal_error").inc()
        await close_within(websocket, CloseCode.INTERNAL_ERROR, "internal error")
    finally:
        tasks = [writer, overflow_watch, close_watch, end_watch] + ([receive] if receive is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
        log.info("session %s: closed", session_id)


def _receive_message(message: dict, codec: Codec, session: Session, limits: ClientLimits, emit) -> None:
    """Decode one client message within the client's limits and hand its events to the session."""
    data = message.get("bytes")
    text = message.get("text") or ""
    if not limits.messages.take(1):
        emit(Error("message_rate_exceeded", f"over {limits.messages.rate:g} messages per second; closing"))
        raise Closing(CloseCode.POLICY_VIOLATION, "too many messages")
    # Characters, not UTF-8 bytes, for text: the same bound within a factor of 4, without encoding it again.
    if not limits.data.take(len(data) if data is not None else len(text)):
        emit(Error("byte_rate_exceeded", f"over {limits.data.rate:g} bytes per second; closing"))
        raise Closing(CloseCode.POLICY_VIOLATION, "too much data")
    events = codec.receive_bytes(data) if data is not None else codec.receive_text(text)
    for event in events:
        if isinstance(event, StreamRefused):
            log.warning("session %s: stream refused: %s", session.id, event.reason)
            raise Closing(CloseCode.POLICY_VIOLATION, event.reason)
        if isinstance(event, AudioReceived):
            if not limits.admit_audio(len(event.samples) / session.sample_rate):
                if limits.report_drop:
                    emit(
                        Error(
                            "audio_rate_exceeded",
                            f"audio is arriving faster than {limits.audio.rate:g}x real time; frames dropped",
                        )
                    )
                continue
        elif isinstance(event, TEXT_TURNS) and not (
            isinstance(event, ResponseRequest) and session.control.calls.continuing
        ):
            if not limits.texts.take(1):
                # Each text turn is an LLM request: one a second at most, and a new one cancels the last.
                refusal = f"over {limits.texts.rate:g} text turns per second; dropped"
                emit(Error("text_rate_exceeded", refusal, getattr(event, "event_id", "")))
                continue
        session.handle(event)


async def _flush(outbox: asyncio.Queue, writer: asyncio.Task) -> None:
    """Let the writer send what is already queued, for a little while."""
    if writer.done():
        return
    try:
        await asyncio.wait_for(outbox.join(), FLUSH_S)
    except TimeoutError:
        pass


async def close_within(websocket: WebSocket, code: CloseCode, reason: str) -> None:
    """Send the close frame if there is room for it within :data:`CLOSE_S`; the caller frees the slot either way."""
    try:
        await asyncio.wait_for(websocket.close(code, reason), CLOSE_S)
    except (TimeoutError, RuntimeError, OSError, WebSocketDisconnect):
        pass
