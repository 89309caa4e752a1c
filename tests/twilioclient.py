"""A simulated Twilio Media Streams call over a real WebSocket, for end-to-end tests and measurements."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from voice_agent.audio import mulaw_decode
from voice_agent.protocols.telephony import TwilioCaller, decode_media

FRAME = 160  # 20 ms at 8 kHz
FRAME_S = 0.02


@dataclass
class Received:
    at: float
    message: dict[str, Any]


@dataclass
class TwilioClient:
    ws: Any
    caller: TwilioCaller
    received: list[Received] = field(default_factory=list)
    echo_marks: bool = True  # Twilio echoes a mark once the audio before it has played
    _reader: asyncio.Task | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        stream_sid: str = "MZ" + "a" * 32,
        parameters: dict[str, str] | None = None,
        call_sid: str = "CA" + "b" * 32,
        **kwargs,
    ) -> TwilioClient:
        ws = await websockets.connect(url, max_size=None)
        client = cls(ws, TwilioCaller(stream_sid, call_sid, parameters), **kwargs)
        client._reader = asyncio.create_task(client._read())
        await ws.send(client.caller.connected())
        await ws.send(client.caller.start())
        return client

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                message = json.loads(text)
                self.received.append(Received(time.monotonic(), message))
                if self.echo_marks and message.get("event") == "mark":
                    asyncio.create_task(self._echo(message["mark"]["name"], self.buffered_s()))
        except websockets.ConnectionClosed:
            pass

    def buffered_s(self) -> float:
        """Agent audio received but not played yet, as a phone would play it: in real time since the last clear."""
        playing_until = 0.0
        for r in self.received:
            kind = r.message.get("event")
            if kind == "clear":
                playing_until = r.at
            elif kind == "media":
                playing_until = max(playing_until, r.at) + FRAME_S
        return max(0.0, playing_until - time.monotonic())

    async def _echo(self, name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self.ws.send(self.caller.mark(name))
        except websockets.ConnectionClosed:
            pass

    async def stream(self, audio: np.ndarray) -> float:
        """Send 8 kHz ``audio`` as 20 ms μ-law media messages at real-time pace; returns when the last was sent."""
        started = time.monotonic()
        for index, start in enumerate(range(0, len(audio), FRAME)):
            await self.ws.send(self.caller.media(audio[start : start + FRAME]))
            await asyncio.sleep(max(0.0, started + (index + 1) * FRAME_S - time.monotonic()))
        return time.monotonic()

    def of(self, kind: str) -> list[Received]:
        return [r for r in self.received if r.message.get("event") == kind]

    def audio(self, media: list[Received]) -> np.ndarray:
        return mulaw_decode(b"".join(decode_media(r.message) for r in media)).astype(np.float32) / 32768.0

    async def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 30.0) -> Received:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for r in self.received[seen:]:
                if predicate(r.message):
                    return r
            seen = len(self.received)
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no matching message; got {[r.message.get('event') for r in self.received]}")

    async def close(self) -> None:
        try:
            await self.ws.send(self.caller.stop())
        except websockets.ConnectionClosed:
            pass
        await self.ws.close()
        if self._reader is not None:
            await self._reader
