"""The thin layer between a WebSocket and a session.

It reads messages, hands them to the protocol codec, feeds the resulting
events to the session, and writes what the session emits through the codec
on a single writer task. Nothing here knows a wire format. It also enforces
the per-client limits (message and audio rate, idle timeout, session length)
and closes the connection when the server asks it to (shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from . import log as logs
from .close_codes import CloseCode
from .config import Settings
from .engines import Engines
from .limits import ClientLimits, Deadlines, Slot
from .metrics import ServerMetrics
from .protocols.events import AudioReceived, Error, InputEvent, OutputEvent
from .session import Session

log = logging.getLogger(__name__)

# About 20 s of 20 ms audio frames. A client further behind than this is not
# reading: the session is dropped rather than buffering without bound.
OUTBOX_LIMIT = 1000
FLUSH_S = 2.0  # how long a closing session may take to send what it already emitted

_DEADLINE_CLOSE = {
    Deadlines.IDLE: "idle timeout",
    Deadlines.TOO_LONG: "session time limit reached",
}


class Codec(Protocol):
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
) -> None:
    """Serve one accepted WebSocket until either side ends it. ``slot`` comes from the server's registry.

    ``opening`` is what the codec tells the session before the client says anything.
    """
    slot = slot or Slot()
    metrics = metrics or ServerMetrics()
    session_id = logs.ensure_session()
    outbox: asyncio.Queue[str | bytes] = asyncio.Queue(OUTBOX_LIMIT)
    overflow = asyncio.Event()

    def emit(event: OutputEvent) -> None:
        metrics.observe(event)
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
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(message)
            outbox.task_done()

    session = Session(engines, settings, emit, session_id)
    for event in opening:
        session.handle(event)
    slot.answering = lambda: session.answering
    limits = ClientLimits(settings)
    log.info("session %s: connected from %s", session_id, websocket.client)
    writer = asyncio.create_task(write())
    overflow_watch = asyncio.create_task(overflow.wait())
    close_watch = asyncio.create_task(slot.close_requested.wait())
    receive: asyncio.Task | None = None
    try:
        with metrics.session():
            while True:
                if receive is None:
                    receive = asyncio.create_task(websocket.receive())
                done, _ = await asyncio.wait(
                    {receive, writer, overflow_watch, close_watch},
                    timeout=limits.deadlines.remaining(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receive in done:
                    message, receive = receive.result(), None
                    if message["type"] == "websocket.disconnect":
                        return
                    _take(message, codec, session, limits, emit)
                    continue
                if overflow_watch in done:
                    raise ClientTooSlow()
                if close_watch in done:
                    raise Closing(slot.close_code, slot.close_reason)
                if writer in done:
                    writer.result()  # raises the writer's error
                    return
                if (expired := limits.deadlines.expired()) is not None:
                    emit(Error(expired, f"{_DEADLINE_CLOSE[expired]}; closing"))
                    raise Closing(CloseCode.NORMAL_CLOSURE, _DEADLINE_CLOSE[expired])
    except Closing as closing:
        log.info("session %s: closing (%d, %s)", session_id, closing.code, closing.reason)
        await _flush(outbox, writer)
        await _close(websocket, closing.code, closing.reason)
    except ClientTooSlow:
        log.warning("session %s: client is not reading; closing", session_id)
        metrics.errors.labels("client_too_slow").inc()
        await _close(websocket, CloseCode.POLICY_VIOLATION, "client too slow")
    except (WebSocketDisconnect, OSError) as exc:
        log.info("session %s: connection lost: %s", session_id, exc)
    except Exception:
        # A bug in this one session: end it cleanly, never the server or other sessions.
        log.exception("session %s: internal error; closing", session_id)
        metrics.errors.labels("internal_error").inc()
        await _close(websocket, CloseCode.INTERNAL_ERROR, "internal error")
    finally:
        tasks = [writer, overflow_watch, close_watch] + ([receive] if receive is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
        log.info("session %s: closed", session_id)


def _take(message: dict, codec: Codec, session: Session, limits: ClientLimits, emit) -> None:
    """Decode one client message within the client's limits and hand its events to the session."""
    limits.deadlines.touch()
    if not limits.messages.take(1):
        emit(Error("message_rate_exceeded", f"over {limits.messages.rate:g} messages per second; closing"))
        raise Closing(CloseCode.POLICY_VIOLATION, "too many messages")
    if message.get("bytes") is not None:
        events = codec.receive_bytes(message["bytes"])
    else:
        events = codec.receive_text(message.get("text") or "")
    for event in events:
        if isinstance(event, AudioReceived) and not limits.admit_audio(len(event.samples) / session.sample_rate):
            if limits.report_drop:
                emit(
                    Error(
                        "audio_rate_exceeded",
                        f"audio is arriving faster than {limits.audio.rate:g}x real time; frames dropped",
                    )
                )
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


async def _close(websocket: WebSocket, code: CloseCode, reason: str) -> None:
    try:
        await websocket.close(code, reason)
    except (RuntimeError, OSError):
        pass
