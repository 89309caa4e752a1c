"""The native wire protocol at ``/ws``: a sans-I/O codec.

Binary messages are PCM16 little-endian mono audio at the session rate, both
ways. Text messages are JSON objects with a ``type``. See ``docs/protocol.md``.
The codec holds no socket: the server feeds it what arrived and sends what it
returns.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..audio import PIPELINE_RATE, SUPPORTED_RATES, float_to_pcm16, pcm16_to_float
from .events import (
    AgentAudio,
    AudioReceived,
    Clear,
    Error,
    InputEvent,
    Mark,
    MarkPlayed,
    Metrics,
    OutputEvent,
    ProtocolError,
    SessionStarted,
    StreamStopped,
    TextReceived,
    Transcript,
)

MAX_TEXT_CHARS = 2000


class NativeProtocol:
    def __init__(self) -> None:
        self.sample_rate = PIPELINE_RATE
        self._started = False
        self._audio_seen = False

    # Client to server.

    def receive_bytes(self, data: bytes) -> list[InputEvent]:
        if len(data) % 2:
            return [
                ProtocolError(
                    "odd_length_audio", f"binary frame of {len(data)} bytes is not whole PCM16 samples; dropped"
                )
            ]
        self._audio_seen = True
        if not data:
            return []
        return [AudioReceived(pcm16_to_float(data))]

    def receive_text(self, text: str) -> list[InputEvent]:
        try:
            message = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return [ProtocolError("invalid_json", "text message is not valid JSON")]
        if not isinstance(message, dict):
            return [ProtocolError("invalid_message", "a text message must be a JSON object")]
        kind = message.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return [ProtocolError("unknown_type", f"unknown message type {kind!r}; ignored")]
        return handler(self, message)

    def _on_start(self, message: dict[str, Any]) -> list[InputEvent]:
        rate = message.get("sample_rate", PIPELINE_RATE)
        if isinstance(rate, float) and math.isfinite(rate) and rate.is_integer():
            rate = int(rate)
        if isinstance(rate, bool) or not isinstance(rate, int) or rate not in SUPPORTED_RATES:
            allowed = ", ".join(map(str, SUPPORTED_RATES))
            return [ProtocolError("unsupported_sample_rate", f"sample_rate must be one of {allowed}; got {rate!r}")]
        if self._started:
            return [ProtocolError("invalid_message", "start was already received; ignored")]
        if self._audio_seen and rate != self.sample_rate:
            return [
                ProtocolError(
                    "start_after_audio",
                    f"start must come before any audio; the session stays at {self.sample_rate} Hz",
                )
            ]
        self._started = True
        self.sample_rate = rate
        options = {k: v for k, v in message.items() if k not in ("type", "sample_rate")}
        return [SessionStarted(rate, options)]

    def _on_mark(self, message: dict[str, Any]) -> list[InputEvent]:
        name = message.get("name")
        if not isinstance(name, str):
            return [ProtocolError("invalid_message", "mark needs a string name")]
        return [MarkPlayed(name)]

    def _on_text(self, message: dict[str, Any]) -> list[InputEvent]:
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            return [ProtocolError("invalid_message", "text needs a non-empty string text")]
        if len(text) > MAX_TEXT_CHARS:
            return [ProtocolError("text_too_long", f"text is over {MAX_TEXT_CHARS} characters")]
        return [TextReceived(text.strip())]

    def _on_stop(self, message: dict[str, Any]) -> list[InputEvent]:
        return [StreamStopped()]

    # Server to client.

    def send(self, event: OutputEvent) -> str | bytes | None:
        if isinstance(event, AgentAudio):
            return float_to_pcm16(event.samples)
        if isinstance(event, Transcript):
            return _json(type="transcript", role=event.role, text=event.text, final=event.final)
        if isinstance(event, Clear):
            return _json(type="clear")
        if isinstance(event, Mark):
            return _json(type="mark", name=event.name)
        if isinstance(event, Metrics):
            return _json(type="metrics", **event.values)
        if isinstance(event, Error):
            return _json(type="error", code=event.code, message=event.message)
        return None  # an event this protocol has no message for (speech started, response ended...)


_HANDLERS = {
    "start": NativeProtocol._on_start,
    "mark": NativeProtocol._on_mark,
    "text": NativeProtocol._on_text,
    "stop": NativeProtocol._on_stop,
}


def _json(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))
