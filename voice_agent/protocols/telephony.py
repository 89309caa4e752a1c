"""Twilio Media Streams (and its Telnyx variant) as a sans-I/O codec.

Every message is a JSON text frame with an ``event``. The caller's audio
arrives as base64 G.711 μ-law at 8 kHz in ``media`` messages; the agent's
audio goes back the same way, one 20 ms frame per message, followed by a
``mark`` after each spoken chunk and a ``clear`` on barge-in. The session runs
at 8 kHz (it resamples to 16 kHz for VAD and STT itself), so one outgoing
``AgentAudio`` frame of 160 samples is one 160-byte ``media`` message.

Telnyx streams the same events with snake_case field names; a
:class:`Dialect` holds the names, so one codec serves both. See
``docs/telephony.md``. :class:`TwilioCaller` builds the messages Twilio sends,
for simulated calls in tests and load tools.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..audio import float_to_int16, mulaw_decode, mulaw_encode
from ..printable import printable
from .client_options import MAX_PARAMETER_CHARS, MAX_PARAMETERS, is_parameter_map, screen_prompt_options
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
    StreamRefused,
    StreamStopped,
    TextReceived,
    Transcript,
)
from .strict_json import InvalidJSON, decode_object

log = logging.getLogger(__name__)

SAMPLE_RATE = 8000
DTMF_DIGITS = frozenset("0123456789*#ABCD")
MAX_ID_CHARS = 128  # Twilio's SIDs have 34 characters, Telnyx's ids 36 to 80
MAX_MARK_CHARS = 100
TWILIO_CALL_SID = re.compile(r"CA[0-9a-f]{32}")


def is_call_sid(value: object) -> bool:
    """A Twilio call SID: ``CA`` and 32 lowercase hex digits."""
    return isinstance(value, str) and TWILIO_CALL_SID.fullmatch(value) is not None


@dataclass(frozen=True)
class Dialect:
    """The field names and values one bridge uses for the shared event set."""

    name: str
    stream_id: str
    sequence: str
    call_id: str
    custom_parameters: str
    media_format: str
    sample_rate: str
    encodings: frozenset[str]
    # Twilio wants the stream id on every message it receives; Telnyx has one stream per socket.
    address_replies: bool
    # What a call id must look like; a start with another is refused and the stream closed. None: any id.
    call_id_pattern: re.Pattern[str] | None = None


TWILIO = Dialect(
    name="twilio",
    stream_id="streamSid",
    sequence="sequenceNumber",
    call_id="callSid",
    custom_parameters="customParameters",
    media_format="mediaFormat",
    sample_rate="sampleRate",
    encodings=frozenset({"audio/x-mulaw"}),
    address_replies=True,
    call_id_pattern=TWILIO_CALL_SID,
)

TELNYX = Dialect(
    name="telnyx",
    stream_id="stream_id",
    sequence="sequence_number",
    call_id="call_control_id",
    custom_parameters="custom_parameters",
    media_format="media_format",
    sample_rate="sample_rate",
    encodings=frozenset({"PCMU"}),
    address_replies=False,
)


class MediaStreamsProtocol:
    """Server side of one Media Stream: wire messages to session events and back.

    ``greeting`` is spoken when the stream starts unless the call's custom
    parameters carry their own and ``allow_client_prompt`` lets them (their
    ``system_prompt`` too); ``dtmf_template`` turns a key press into text
    input (``{digit}`` is replaced), and an empty template ignores key presses.

    ``call_id``: the call this stream was issued for (a redeemed call token,
    :mod:`voice_agent.protocols.call_tokens`); a ``start`` for another call is refused
    and the stream closed. Only then is the call reported ``call_verified``:
    otherwise its id is only what the other end claims.
    """

    def __init__(
        self,
        dialect: Dialect = TWILIO,
        *,
        dtmf_template: str = "",
        greeting: str = "",
        allow_client_prompt: bool = False,
        call_id: str | None = None,
    ) -> None:
        self.dialect = dialect
        self.dtmf_template = dtmf_template
        self.greeting = greeting
        self.allow_client_prompt = allow_client_prompt
        self.expected_call_id = call_id
        self.stream_id: str | None = None
        self.call_id: str | None = None
        self._last_sequence = 0

    @property
    def name(self) -> str:
        """What session reports and agents call this protocol: the bridge's."""
        return self.dialect.name

    # Bridge to server.

    def receive_bytes(self, data: bytes) -> list[InputEvent]:
        return [
            ProtocolError(
                "unexpected_binary", f"{self.dialect.name} media streams send JSON text only; binary frame dropped"
            )
        ]

    def receive_text(self, text: str) -> list[InputEvent]:
        try:
            message = decode_object(text)
        except InvalidJSON as invalid:
            return [ProtocolError(invalid.code, invalid.message)]
        event = message.get("event")
        if event == "connected":
            return []
        if event == "error":
            # Telnyx reports its own failures in-band.
            return [ProtocolError("bridge_error", f"{self.dialect.name} reported: {printable(message.get('payload'))}")]
        handler = _HANDLERS.get(event) if isinstance(event, str) else None
        if handler is None:
            return [ProtocolError("unknown_event", f"unknown event {printable(event)}; ignored")]
        sequence = _integer(message.get(self.dialect.sequence))
        if sequence is None:
            return [ProtocolError("invalid_message", f"{event} needs a numeric {self.dialect.sequence}; ignored")]
        if event != "start":
            if self.stream_id is None:
                return [ProtocolError("before_start", f"{event} before start; ignored")]
            stream_id = message.get(self.dialect.stream_id)
            if stream_id != self.stream_id:
                return [
                    ProtocolError(
                        "wrong_stream",
                        f"{event} for stream {printable(stream_id)}, not {printable(self.stream_id)}; ignored",
                    )
                ]
        stale = sequence <= self._last_sequence
        self._last_sequence = max(self._last_sequence, sequence)
        if stale and event == "media":
            # Audio out of order would scramble the VAD's timeline: late frames are dropped.
            return [ProtocolError("out_of_order", f"media {sequence} arrived after a later message; dropped")]
        return handler(self, message)

    def _on_start(self, message: dict[str, Any]) -> list[InputEvent]:
        d = self.dialect
        start = message.get("start")
        if not isinstance(start, dict):
            return [ProtocolError("invalid_message", "start needs a start object")]
        stream_id = start.get(d.stream_id, message.get(d.stream_id))
        if not _is_id(stream_id):
            return [ProtocolError("invalid_message", f"start needs a {d.stream_id} of 1 to {MAX_ID_CHARS} characters")]
        if self.stream_id is not None:
            return [ProtocolError("invalid_message", "start was already received; ignored")]
        media_format = start.get(d.media_format, {})
        if not _is_supported_format(media_format, d):
            encodings = ", ".join(sorted(d.encodings))
            return [
                ProtocolError(
                    "unsupported_media_format",
                    f"only {encodings} at {SAMPLE_RATE} Hz mono is supported; got {printable(media_format)}",
                )
            ]
        errors: list[InputEvent] = []
        parameters = start.get(d.custom_parameters) or {}
        if not is_parameter_map(parameters):
            errors.append(
                ProtocolError(
                    "invalid_message",
                    f"{d.custom_parameters} must be an object of at most {MAX_PARAMETERS} strings "
                    f"of at most {MAX_PARAMETER_CHARS} characters; ignored",
                )
            )
            parameters = {}
        call_id = start.get(d.call_id)
        if d.call_id_pattern is not None and not (isinstance(call_id, str) and d.call_id_pattern.fullmatch(call_id)):
            return [StreamRefused(f"start needs a {d.call_id} of the form {d.call_id_pattern.pattern}")]
        if self.expected_call_id is not None and call_id != self.expected_call_id:
            return [StreamRefused(f"{d.call_id} is not the call this stream was issued for")]
        self.stream_id = stream_id
        self.call_id = call_id if _is_id(call_id) else None
        prompt_options, refused = screen_prompt_options(parameters, self.allow_client_prompt)
        errors.extend(refused)
        options: dict[str, Any] = {
            "stream_id": stream_id,
            "call_id": self.call_id,
            "call_verified": self.expected_call_id is not None,
            "custom_parameters": parameters,
            "greeting": self.greeting,
            **prompt_options,
        }
        log.info("%s stream %s started for call %s", d.name, printable(stream_id), printable(self.call_id))
        return [*errors, SessionStarted(SAMPLE_RATE, options)]

    def _on_media(self, message: dict[str, Any]) -> list[InputEvent]:
        media = message.get("media")
        if not isinstance(media, dict) or not isinstance(media.get("payload"), str):
            return [ProtocolError("invalid_message", "media needs a media.payload string")]
        track = media.get("track", "inbound")
        if not isinstance(track, str):
            return [ProtocolError("invalid_message", "media.track must be a string")]
        if track not in ("inbound", "inbound_track"):
            return []  # a bridge streaming both tracks also echoes the agent's own audio
        try:
            data = base64.b64decode(media["payload"], validate=True)
        except (binascii.Error, ValueError):
            return [ProtocolError("invalid_payload", "media.payload is not valid base64; dropped")]
        if not data:
            return []
        return [AudioReceived(mulaw_decode(data).astype(np.float32) / 32768.0)]

    def _on_mark(self, message: dict[str, Any]) -> list[InputEvent]:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        if not isinstance(name, str) or len(name) > MAX_MARK_CHARS:
            return [
                ProtocolError(
                    "invalid_message", f"mark needs a mark.name string of at most {MAX_MARK_CHARS} characters"
                )
            ]
        return [MarkPlayed(name)]

    def _on_dtmf(self, message: dict[str, Any]) -> list[InputEvent]:
        dtmf = message.get("dtmf")
        digit = dtmf.get("digit") if isinstance(dtmf, dict) else None
        if not isinstance(digit, str) or digit.upper() not in DTMF_DIGITS:
            return [
                ProtocolError("invalid_message", f"dtmf needs a dtmf.digit, one of 0-9 * # A-D; got {printable(digit)}")
            ]
        if not self.dtmf_template:
            return []
        return [TextReceived(self.dtmf_template.replace("{digit}", digit.upper()))]

    def _on_stop(self, message: dict[str, Any]) -> list[InputEvent]:
        log.info("%s stream %s stopped", self.dialect.name, printable(self.stream_id))
        return [StreamStopped()]

    # Server to bridge.

    def send(self, event: OutputEvent) -> str | None:
        if self.stream_id is None:
            return None  # nothing can be addressed before start
        if isinstance(event, AgentAudio):
            payload = base64.b64encode(mulaw_encode(float_to_int16(event.samples))).decode("ascii")
            return self._message("media", media={"payload": payload})
        if isinstance(event, Mark):
            return self._message("mark", mark={"name": event.name})
        if isinstance(event, Clear):
            return self._message("clear")
        if isinstance(event, (Transcript, Metrics, Error)):
            return None  # no such message on a phone line; the connection and the session log them
        # An event this protocol has no message for (speech started, response ended...); call control
        # (CallEnded, CallTransferred) goes through Twilio's REST API instead.
        return None

    def _message(self, event: str, **fields: Any) -> str:
        if self.dialect.address_replies:
            fields[self.dialect.stream_id] = self.stream_id
        return _json(event=event, **fields)


_HANDLERS = {
    "start": MediaStreamsProtocol._on_start,
    "media": MediaStreamsProtocol._on_media,
    "mark": MediaStreamsProtocol._on_mark,
    "dtmf": MediaStreamsProtocol._on_dtmf,
    "stop": MediaStreamsProtocol._on_stop,
}


class TwilioCaller:
    """The Twilio side of a Media Stream: builds what Twilio sends, for simulated calls."""

    def __init__(self, stream_sid: str, call_sid: str, custom_parameters: dict[str, str] | None = None):
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.custom_parameters = custom_parameters or {}
        self._sequence = 0
        self._chunk = 0
        self._timestamp_ms = 0

    def connected(self) -> str:
        return _json(event="connected", protocol="Call", version="1.0.0")

    def start(self) -> str:
        start = {
            "accountSid": "AC" + "0" * 32,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": SAMPLE_RATE, "channels": 1},
            "customParameters": self.custom_parameters,
        }
        return self._message("start", start=start)

    def media(self, samples: np.ndarray) -> str:
        """One message of caller audio: float32 mono at 8 kHz."""
        self._chunk += 1
        media = {
            "track": "inbound",
            "chunk": str(self._chunk),
            "timestamp": str(self._timestamp_ms),
            "payload": base64.b64encode(mulaw_encode(float_to_int16(samples))).decode("ascii"),
        }
        self._timestamp_ms += len(samples) * 1000 // SAMPLE_RATE
        return self._message("media", media=media)

    def mark(self, name: str) -> str:
        return self._message("mark", mark={"name": name})

    def dtmf(self, digit: str) -> str:
        return self._message("dtmf", dtmf={"track": "inbound_track", "digit": digit})

    def stop(self) -> str:
        return self._message("stop", stop={"accountSid": "AC" + "0" * 32, "callSid": self.call_sid})

    def _message(self, event: str, **fields: Any) -> str:
        self._sequence += 1
        return _json(event=event, sequenceNumber=str(self._sequence), streamSid=self.stream_sid, **fields)


def decode_media(message: dict[str, Any]) -> bytes:
    """The μ-law bytes of a ``media`` message the server sent."""
    return base64.b64decode(message["media"]["payload"], validate=True)


def _is_supported_format(media_format: Any, d: Dialect) -> bool:
    if not isinstance(media_format, dict):
        return False
    encoding = media_format.get("encoding", next(iter(d.encodings)))
    return (
        isinstance(encoding, str)  # a list or an object is unhashable: `in` a frozenset would raise
        and encoding in d.encodings
        and _integer(media_format.get(d.sample_rate, SAMPLE_RATE)) == SAMPLE_RATE
        and _integer(media_format.get("channels", 1)) == 1
    )


def _integer(value: Any) -> int | None:
    """A wire integer: Twilio sends numbers as decimal strings, Telnyx as either."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20:
        return int(value)
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


def _json(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))
