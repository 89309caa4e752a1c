"""The values of the OpenAI Realtime protocol's client events, checked and mapped onto ours.

Audio formats, turn detection, noise reduction, token limits and function tools, as
:mod:`voice_agent.protocols.realtime` reads them from ``session.update``,
``response.create`` and ``conversation.item.create``, and writes them back in
``session.created``/``session.updated``. A value that cannot be used raises
:class:`Invalid`, which the codec turns into an ``error`` event.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..audio import alaw_decode, alaw_encode, float_to_int16, float_to_pcm16, mulaw_decode, mulaw_encode, pcm16_to_float
from ..printable import printable
from .events import (
    MANUAL,
    NO_TOKEN_LIMIT,
    SEMANTIC_VAD,
    SERVER_VAD,
    ToolChoice,
    ToolSchemas,
    TurnDetection,
    chosen_name,
    names_of,
)

MAX_TOKENS = 4096  # the Realtime API's own bound on max_output_tokens
EAGERNESS = ("low", "medium", "high", "auto")
IDLE_TIMEOUT_MS = (5_000, 30_000)  # the Realtime API's own bounds
NOISE_REDUCTION = ("near_field", "far_field")
# The client's functions go into every prompt: a bound on them, and on each output that enters the history.
MAX_TOOLS = 64
MAX_TOOLS_CHARS = 32_000
MAX_OUTPUT_CHARS = 16_000
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class AudioFormat:
    """One wire format: its Realtime description, its rate and its codec."""

    type: str
    rate: int
    sample_bytes: int
    decode: Callable[[bytes], np.ndarray]  # wire bytes to float32
    encode: Callable[[np.ndarray], bytes]  # float32 to wire bytes

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}


PCM = AudioFormat("audio/pcm", 24000, 2, pcm16_to_float, float_to_pcm16)
PCMU = AudioFormat(
    "audio/pcmu",
    8000,
    1,
    lambda data: mulaw_decode(data).astype(np.float32) / 32768.0,
    lambda samples: mulaw_encode(float_to_int16(samples)),
)
PCMA = AudioFormat(
    "audio/pcma",
    8000,
    1,
    lambda data: alaw_decode(data).astype(np.float32) / 32768.0,
    lambda samples: alaw_encode(float_to_int16(samples)),
)
FORMATS = {PCM.type: PCM, PCMU.type: PCMU, PCMA.type: PCMA}
_BETAFORMATS = {"pcm16": PCM, "g711_ulaw": PCMU, "g711_alaw": PCMA}


class Invalid(Exception):
    """A client event that cannot be used: becomes an ``error`` event."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def object_field(message: dict[str, Any], name: str, required: bool = True) -> dict[str, Any]:
    value = message.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise Invalid("invalid_value", f"{name} must be an object")
    return value


def audio_format(value: Any) -> AudioFormat:
    if isinstance(value, str) and value in _BETAFORMATS:
        return _BETAFORMATS[value]
    if isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"] in FORMATS:
        audio_format = FORMATS[value["type"]]
        rate = value.get("rate", audio_format.rate)
        if rate == audio_format.rate and not isinstance(rate, bool):
            return audio_format
        raise Invalid("unsupported_audio_format", f"{audio_format.type} is served at {audio_format.rate} Hz only")
    raise Invalid(
        "unsupported_audio_format",
        f"expected {{'type': 'audio/pcm', 'rate': 24000}}, audio/pcmu or audio/pcma; got {printable(value)}",
    )


def turn_detection(value: Any) -> TurnDetection:
    if value is None:
        return TurnDetection(MANUAL, create_response=False, interrupt_response=False)
    if not isinstance(value, dict):
        raise Invalid("invalid_value", "must be an object or null")
    mode = value.get("type", SERVER_VAD)
    if mode not in (SERVER_VAD, SEMANTIC_VAD):
        raise Invalid("invalid_value", f"type must be server_vad or semantic_vad; got {printable(mode)}")
    flags = {}
    for name in ("create_response", "interrupt_response"):
        if value.get(name) is not None:
            if not isinstance(value[name], bool):
                raise Invalid("invalid_value", f"{name} must be true or false")
            flags[name] = value[name]
    if mode == SEMANTIC_VAD:
        eagerness = value.get("eagerness") or "auto"
        if eagerness not in EAGERNESS:
            raise Invalid("invalid_value", f"eagerness must be one of {', '.join(EAGERNESS)}")
        return TurnDetection(SEMANTIC_VAD, eagerness=eagerness, **flags)
    silence = _whole(value, "silence_duration_ms", 0, 10_000)
    padding = _whole(value, "prefix_padding_ms", 0, 2_000)
    idle_timeout = _whole(value, "idle_timeout_ms", IDLE_TIMEOUT_MS[0], IDLE_TIMEOUT_MS[1])
    threshold = value.get("threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
        or not 0 < threshold < 1
    ):
        raise Invalid("invalid_value", "threshold must be a number between 0 and 1")
    return TurnDetection(
        SERVER_VAD,
        silence_ms=silence,
        prefix_padding_ms=padding,
        threshold=None if threshold is None else float(threshold),
        idle_timeout_ms=idle_timeout,
        **flags,
    )


def _whole(value: dict[str, Any], name: str, low: int, high: int) -> int | None:
    number = value.get(name)
    if number is None:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise Invalid("invalid_value", f"{name} must be a whole number from {low} to {high}")
    return number


def noise_reduction(value: Any) -> str | None:
    """The noise reduction type asked for, or None for none."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in NOISE_REDUCTION:
        raise Invalid("invalid_value", "must be {'type': 'near_field'}, {'type': 'far_field'} or null")
    return kind


def max_tokens(value: Any) -> int:
    if value == "inf":
        return NO_TOKEN_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise Invalid("invalid_value", f"max_output_tokens must be 1 to {MAX_TOKENS} or 'inf'")
    return value


def tools(value: Any) -> ToolSchemas:
    """The Realtime API's function tools as OpenAI chat tools."""
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise Invalid("invalid_value", f"tools must be a list of at most {MAX_TOOLS} function tools")
    if len(json.dumps(value)) > MAX_TOOLS_CHARS:
        raise Invalid("invalid_value", f"the tools are over {MAX_TOOLS_CHARS} characters of JSON")
    schemas: list[dict[str, Any]] = []
    for tool in value:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise Invalid("unsupported", "only function tools are supported (no MCP)")
        name, description, parameters = tool.get("name"), tool.get("description"), tool.get("parameters")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise Invalid("invalid_value", "a tool's name must be 1 to 64 letters, digits, _ or -")
        if description is not None and not isinstance(description, str):
            raise Invalid("invalid_value", f"the description of {name} must be a string")
        if parameters is not None and not isinstance(parameters, dict):
            raise Invalid("invalid_value", f"the parameters of {name} must be a JSON schema object")
        function: dict[str, Any] = {"name": name}
        if description:
            function["description"] = description
        function["parameters"] = parameters if parameters is not None else {"type": "object", "properties": {}}
        schemas.append({"type": "function", "function": function})
    if len(names_of(tuple(schemas))) < len(schemas):
        raise Invalid("invalid_value", "two tools share a name")
    return tuple(schemas)


def tool_choice(value: Any) -> ToolChoice:
    """The Realtime API's tool_choice as an OpenAI chat one."""
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise Invalid("invalid_value", "tool_choice must be auto, none, required or {'type': 'function', 'name': ...}")


def realtime_tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", **schema["function"]}


def realtime_tool_choice(choice: ToolChoice) -> ToolChoice:
    forced = chosen_name(choice)
    return choice if forced is None else {"type": "function", "name": forced}


def audio_modalities(value: Any) -> bool:
    """Whether a modalities list asks for spoken answers (the beta's ["text", "audio"] does too)."""
    return isinstance(value, list) and "audio" in value


def describe_turn_detection(detection: TurnDetection) -> dict[str, Any] | None:
    flags = {"create_response": detection.create_response, "interrupt_response": detection.interrupt_response}
    if detection.mode == MANUAL:
        return None
    if detection.mode == SEMANTIC_VAD:
        return {"type": SEMANTIC_VAD, "eagerness": detection.eagerness, **flags}
    return {
        "type": SERVER_VAD,
        "threshold": detection.threshold,
        "prefix_padding_ms": detection.prefix_padding_ms,
        "silence_duration_ms": detection.silence_ms,
        "idle_timeout_ms": detection.idle_timeout_ms,
        **flags,
    }
