"""A small native-protocol client for end-to-end tests, over the replay client's transport.

It keeps every message as it came (a dict for JSON, bytes for audio) with its
arrival time, so tests can assert on the wire format itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voice_agent.replay.transport import FRAME_S, Connection, NativeClientCodec, stream

__all__ = ["FRAME_S", "NativeClient", "Received"]


@dataclass
class Received:
    at: float
    message: Any  # dict for JSON, bytes for audio


@dataclass
class NativeClient:
    connection: Connection
    rate: int = 16000
    received: list[Received] = field(default_factory=list)
    _reader: asyncio.Task | None = None

    @property
    def ws(self):
        """The raw WebSocket, for tests that send malformed messages or drop the connection."""
        return self.connection.websocket

    @classmethod
    async def connect(cls, url: str, rate: int | None = 16000) -> NativeClient:
        client = cls(await Connection.open(url, NativeClientCodec(), rate), rate or 16000)
        client._reader = asyncio.create_task(client._read())
        return client

    async def _read(self) -> None:
        while (item := await self.connection.receive()) is not None:
            at, message = item
            self.received.append(Received(at, message if isinstance(message, bytes) else json.loads(message)))

    async def stream(self, audio: np.ndarray) -> float:
        """Send ``audio`` in 20 ms frames at real-time pace; returns when the last frame was sent."""
        await stream(self.connection, audio, self.rate)
        return time.monotonic()

    def json(self, kind: str | None = None) -> list[dict]:
        return [
            r.message
            for r in self.received
            if isinstance(r.message, dict) and (kind is None or r.message.get("type") == kind)
        ]

    def audio_messages(self) -> list[Received]:
        return [r for r in self.received if isinstance(r.message, bytes)]

    async def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for r in self.received[seen:]:
                if isinstance(r.message, dict) and predicate(r.message):
                    return r.message
            seen = len(self.received)
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no matching message; got {self.json()}")

    async def close(self) -> None:
        await self.connection.close()
        if self._reader is not None:
            await self._reader
