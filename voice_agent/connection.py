"""The thin layer between a WebSocket and a session.

It reads messages, hands them to the protocol codec, feeds the resulting
events to the session, and writes what the session emits through the codec
on a single writer task. Nothing here knows a wire format.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from .config import Settings
from .engines import Engines
from .protocols.events import InputEvent, OutputEvent
from .session import Session

log = logging.getLogger(__name__)

# About 20 s of 20 ms audio frames. A client further behind than this is not
# reading: the session is dropped rather than buffering without bound.
OUTBOX_LIMIT = 1000


class Codec(Protocol):
    def receive_bytes(self, data: bytes) -> list[InputEvent]: ...

    def receive_text(self, text: str) -> list[InputEvent]: ...

    def send(self, event: OutputEvent) -> str | bytes | None: ...


class ClientTooSlow(Exception):
    pass


async def run_session(websocket: WebSocket, codec: Codec, engines: Engines, settings: Settings) -> None:
    session_id = uuid.uuid4().hex[:8]
    outbox: asyncio.Queue[str | bytes] = asyncio.Queue(OUTBOX_LIMIT)
    overflow = asyncio.Event()

    def emit(event: OutputEvent) -> None:
        message = codec.send(event)
        if message is None:
            return
        try:
            outbox.put_nowait(message)
        except asyncio.QueueFull:
            overflow.set()

    async def write() -> None:
        while True:
            message = await outbox.get()
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(message)

    session = Session(engines, settings, emit, session_id)
    log.info("session %s: connected from %s", session_id, websocket.client)
    writer = asyncio.create_task(write())
    overflow_watch = asyncio.create_task(overflow.wait())
    try:
        while True:
            receive = asyncio.create_task(websocket.receive())
            done, _ = await asyncio.wait({receive, writer, overflow_watch}, return_when=asyncio.FIRST_COMPLETED)
            if receive not in done:
                receive.cancel()
                if overflow_watch in done:
                    raise ClientTooSlow()
                writer.result()  # raises the writer's error
                return
            message = receive.result()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                events = codec.receive_bytes(message["bytes"])
            else:
                events = codec.receive_text(message.get("text") or "")
            for event in events:
                session.handle(event)
    except ClientTooSlow:
        log.warning("session %s: client is not reading; closing", session_id)
        await _close(websocket, 1008, "client too slow")
    except (WebSocketDisconnect, OSError) as exc:
        log.info("session %s: connection lost: %s", session_id, exc)
    except Exception:
        # A bug in this one session: end it cleanly, never the server or other sessions.
        log.exception("session %s: internal error; closing", session_id)
        await _close(websocket, 1011, "internal error")
    finally:
        for task in (writer, overflow_watch):
            task.cancel()
        await asyncio.gather(writer, overflow_watch, return_exceptions=True)
        await session.close()
        log.info("session %s: closed", session_id)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    try:
        await websocket.close(code, reason)
    except (RuntimeError, OSError):
        pass
