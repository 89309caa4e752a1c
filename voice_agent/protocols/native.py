"""The native wire protocol at ``/ws``: a sans-I/O codec.

Binary messages are PCM16 little-endian mono audio at the session rate, both
ways. Text messages are JSON objects with a ``type``. See ``docs/protocol.md``.
The codec holds no socket: the server feeds it what arrived and sends what it
returns.
"""

from __future__ import annotations

import json
from typing import Any

from ..audio import PIPELINE_RATE, SUPPORTED_RATES, float_to_pcm16, pcm16_to_float
from ..printable import printable
from .client_options import (
    MAX_PARAMETER_CHARS,
    MAX_PARAMETERS,
    PROMPT_OPTIONS,
    is_parameter_map,
    screen_prompt_options,
    user_text_error,
)
from .events import (
    AgentAudio,
    AgentState,
    AudioReceived,
    CallEnded,
    CallTransferred,
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
from .strict_json import InvalidJSON, decode_object

MAX_TEXT_CHARS = 2000
MAX_MARK_CHARS = 100


class NativeProtocol:
    """``allow_client_prompt``: whether ``start`` may set the system prompt and the greeting."""

    name = "ws"  # what session reports and agents call this protocol

    def __init__(self, allow_client_prompt: bool = False) -> None:
        self.sample_rate = PIPELINE_RATE
        self.allow_client_prompt = allow_client_prompt
        self._started = False
        self._input_seen = False  # audio or text: the session is under way, start comes too late

    # Client to server.

    def receive_bytes(self, data: bytes) -> list[InputEvent]:
        if len(data) % 2:
            return [
                ProtocolError(
                    "odd_length_audio", f"binary frame of {len(data)} bytes is not whole PCM16 samples; dropped"
                )
            ]
        self._input_seen = True
        if not data:
            return []
        return [AudioReceived(pcm16_to_float(data))]

    def receive_text(self, text: str) -> list[InputEvent]:
        try:
            message = decode_object(text)
        except InvalidJSON as invalid:
            return [ProtocolError(invalid.code, invalid.message)]
        kind = message.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return [ProtocolError("unknown_type", f"unknown message type {printable(kind)}; ignored")]
        return handler(self, message)

    def _on_start(self, message: dict[str, Any]) -> list[InputEvent]:
        rate = message.get("sample_rate", PIPELINE_RATE)
        if isinstance(rate, float) and rate.is_integer():  # strict JSON: always finite
            rate = int(rate)
        if isinstance(rate, bool) or not isinstance(rate, int) or rate not in SUPPORTED_RATES:
            allowed = ", ".join(map(str, SUPPORTED_RATES))
            return [
                ProtocolError("unsupported_sample_rate", f"sample_rate must be one of {allowed}; got {printable(rate)}")
            ]
        if self._started:
            return [ProtocolError("invalid_message", "start was already received; ignored")]
        if self._input_seen:
            # Audio already decoded at one rate, or an answer already under way: a start now would
            # switch the rate or the prompt in the middle of it.
            return [
                ProtocolError(
                    "start_after_input",
                    f"start must come before any audio or text; ignored (the session stays at {self.sample_rate} Hz)",
                )
            ]
        self._started = True
        self.sample_rate = rate
        options: dict[str, Any]
        options, errors = screen_prompt_options(message, self.allow_client_prompt)
        echo_cancelled = message.get("echo_cancelled", False)
        if not isinstance(echo_cancelled, bool):
            errors.append(ProtocolError("invalid_message", "echo_cancelled must be true or false; ignored"))
        elif echo_cancelled:
            options = {**options, "echo_cancelled": True}
        # The other fields go to an agent's start hook, as a phone call's custom parameters do; bounded the same way.
        parameters = {
            k: v for k, v in message.items() if k not in ("type", "sample_rate", *PROMPT_OPTIONS) and isinstance(v, str)
        }
        if is_parameter_map(parameters):
            if parameters:
                options = {**options, "custom_parameters": parameters}
        else:
            errors.append(
                ProtocolError(
                    "invalid_message",
                    f"start's other string fields must be at most {MAX_PARAMETERS} "
                    f"of at most {MAX_PARAMETER_CHARS} characters; ignored",
                )
            )
        return [*errors, SessionStarted(rate, options)]

    def _on_mark(self, message: dict[str, Any]) -> list[InputEvent]:
        name = message.get("name")
        if not isinstance(name, str) or len(name) > MAX_MARK_CHARS:
            return [
                ProtocolError("invalid_message", f"mark needs a string name of at most {MAX_MARK_CHARS} characters")
            ]
        return [MarkPlayed(name)]

    def _on_text(self, message: dict[str, Any]) -> list[InputEvent]:
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            return [ProtocolError("invalid_message", "text needs a non-empty string text")]
        if len(text) > MAX_TEXT_CHARS:
            return [ProtocolError("text_too_long", f"text is over {MAX_TEXT_CHARS} characters")]
        if (refused := user_text_error(text)) is not None:
            return [refused]
        self._input_seen = True
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
        if isinstance(event, AgentState):
            return _json(type="agent_state", state=event.state)
        if isinstance(event, Mark):
            return _json(type="mark", name=event.name)
        if isinstance(event, Metrics):
            return _json(type="metrics", **event.values)
        if isinstance(event, Error):
            return _json(type="error", code=event.code, message=event.message)
        if isinstance(event, CallEnded):
            return _json(type="call_ended", reason=event.reason)
        if isinstance(event, CallTransferred):
            return _json(type="transfer", to=event.to)
        return None  # an event this protocol has no message for (speech started, response ended...)


_HANDLERS = {
    "start": NativeProtocol._on_start,
    "mark": NativeProtocol._on_mark,
    "text": NativeProtocol._on_text,
    "stop": NativeProtocol._on_stop,
}


def _json(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))
