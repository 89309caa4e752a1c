"""The official ``openai`` SDK as a client of ``/v1/realtime``, for end-to-end tests.

It keeps every server event with its arrival time, and streams audio at
real-time pace as ``input_audio_buffer.append`` events.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from openai import AsyncOpenAI

from voice_agent.audio import float_to_int16, float_to_pcm16, mulaw_encode

FRAME_S = 0.02


@dataclass
class RealtimeClient:
    connection: Any  # the SDK's AsyncRealtimeConnection
    manager: Any
    received: list[tuple[float, Any]] = field(default_factory=list)
    _reader: asyncio.Task | None = None

    @classmethod
    async def connect(cls, base_url: str, api_key: str = "unused", model: str = "gpt-realtime") -> RealtimeClient:
        """``base_url`` is the server's HTTP URL; the SDK turns it into ``ws://…/v1/realtime?model=…``.

        The client asks for our per-turn metrics event too (``?metrics=1``).
        """
        client = AsyncOpenAI(api_key=api_key, base_url=base_url + "/v1")
        manager = client.realtime.connect(model=model, extra_query={"metrics": "1"})
        realtime = cls(await manager.enter(), manager)
        realtime._reader = asyncio.create_task(realtime._read())
        return realtime

    async def _read(self) -> None:
        async for event in self.connection:
            self.received.append((time.monotonic(), event))

    def events(self, kind: str | None = None) -> list[Any]:
        return [e for _, e in self.received if kind is None or e.type == kind]

    def types(self) -> list[str]:
        return [e.type for _, e in self.received]

    async def wait_for(self, kind: str, predicate: Callable[[Any], bool] = lambda e: True, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, event in self.received:
                if event.type == kind and predicate(event):
                    return event
            if self._reader is not None and self._reader.done():
                self._reader.result()
                break
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no {kind}; got {self.types()}")

    async def stream(self, audio: np.ndarray, rate: int = 24000, mulaw: bool = False) -> float:
        """Send float32 ``audio`` in 20 ms appends at real-time pace; returns when the last one was sent."""
        frame = int(rate * FRAME_S)
        started = time.monotonic()
        for index, start in enumerate(range(0, len(audio), frame)):
            piece = audio[start : start + frame]
            data = mulaw_encode(float_to_int16(piece)) if mulaw else float_to_pcm16(piece)
            await self.connection.input_audio_buffer.append(audio=base64.b64encode(data).decode())
            delay = started + (index + 1) * FRAME_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        return time.monotonic()

    def audio(self, response_id: str | None = None) -> bytes:
        """The audio deltas received (of one response), decoded from base64."""
        return b"".join(
            base64.b64decode(e.delta)
            for e in self.events("response.output_audio.delta")
            if response_id is None or e.response_id == response_id
        )

    async def close(self) -> None:
        await self.connection.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
