"""A small native-protocol client for end-to-end tests."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import websockets

from voice_agent.audio import float_to_pcm16

FRAME_S = 0.02


@dataclass
class Received:
    at: float
    message: Any  # dict for JSON, bytes for audio


@dataclass
class NativeClient:
    ws: Any
    rate: int = 16000
    received: list[Received] = field(default_factory=list)
    _reader: asyncio.Task | None = None

    @classmethod
    async def connect(cls, url: str, rate: int | None = 16000) -> "NativeClient":
        ws = await websockets.connect(url, max_size=None)
        client = cls(ws, rate or 16000)
        client._reader = asyncio.create_task(client._read())
        if rate is not None:
            await ws.send(json.dumps({"type": "start", "sample_rate": rate}))
        return client

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                value = message if isinstance(message, bytes) else json.loads(message)
                self.received.append(Received(time.monotonic(), value))
        except websockets.ConnectionClosed:
            pass

    async def stream(self, audio: np.ndarray) -> float:
        """Send ``audio`` in 20 ms frames at real-time pace; returns when the last frame was sent."""
        frame = int(self.rate * FRAME_S)
        started = time.monotonic()
        for index, start in enumerate(range(0, len(audio), frame)):
            await self.ws.send(float_to_pcm16(audio[start : start + frame]))
            await asyncio.sleep(max(0.0, started + (index + 1) * FRAME_S - time.monotonic()))
        return time.monotonic()

    def json(self, kind: str | None = None) -> list[dict]:
        return [r.message for r in self.received if isinstance(r.message, dict) and (kind is None or r.message.get("type") == kind)]

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
        await self.ws.close()
        if self._reader is not None:
            await self._reader
