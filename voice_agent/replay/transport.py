"""The client side of the agent's wire protocols, and a thin socket around them.

A client codec is sans-I/O, like the server's: it turns what the client wants
to say (start, audio, mark echoes, stop) into wire messages, and wire messages
from the agent into the same output events the server's codec consumes
(:mod:`voice_agent.protocols.events`). :class:`Connection` only moves those
messages over a WebSocket and stamps each arrival with the client clock.
Adding a transport (Twilio Media Streams) is a new codec in ``CODECS``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from typing import Protocol

import numpy as np

from ..audio import float_to_int16, float_to_pcm16, mulaw_decode, mulaw_encode, pcm16_to_float
from ..protocols.events import AgentAudio, Clear, Error, Mark, Metrics, OutputEvent, Transcript

FRAME_S = 0.02


class ClientCodec(Protocol):
    """What a replay client needs from a wire protocol."""

    transcripts: bool  # it carries the agent's transcript: an answer's final one tells that it is over

    def start(self, sample_rate: int) -> list[str | bytes]: ...

    def audio(self, samples: np.ndarray) -> list[str | bytes]: ...

    def mark_played(self, name: str) -> list[str | bytes]: ...

    def stop(self) -> list[str | bytes]: ...

    def receive(self, message: str | bytes) -> list[OutputEvent]: ...


class NativeClientCodec:
    """The client side of the native protocol at ``/ws`` (see ``docs/protocol.md``)."""

    transcripts = True

    def start(self, sample_rate: int) -> list[str | bytes]:
        return [json.dumps({"type": "start", "sample_rate": sample_rate})]

    def audio(self, samples: np.ndarray) -> list[str | bytes]:
        return [float_to_pcm16(samples)]

    def mark_played(self, name: str) -> list[str | bytes]:
        return [json.dumps({"type": "mark", "name": name})]

    def stop(self) -> list[str | bytes]:
        return [json.dumps({"type": "stop"})]

    def receive(self, message: str | bytes) -> list[OutputEvent]:
        if isinstance(message, bytes):
            if len(message) % 2:
                return [Error("odd_length_audio", f"agent sent {len(message)} bytes of PCM16")]
            return [AgentAudio(pcm16_to_float(message))]
        try:
            data = json.loads(message)
        except json.JSONDecodeError:
            return [Error("invalid_json", f"agent sent text that is not JSON: {message[:80]!r}")]
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "transcript":
            return [Transcript(str(data.get("role")), str(data.get("text", "")), bool(data.get("final")))]
        if kind == "clear":
            return [Clear()]
        if kind == "mark":
            return [Mark(str(data.get("name")))]
        if kind == "metrics":
            return [Metrics({k: v for k, v in data.items() if k != "type"})]
        if kind == "error":
            return [Error(str(data.get("code")), str(data.get("message")))]
        if kind == "agent_state":
            return []  # the replay times turns from the audio and transcripts themselves
        return [Error("unknown_type", f"agent sent an unknown message type {kind!r}")]


class TwilioClientCodec:
    """The caller's side of Twilio Media Streams at ``/twilio`` (see ``docs/telephony.md``).

    Audio is 8 kHz μ-law both ways (run replay with ``--rate 8000``). Twilio
    carries no transcripts or metrics, so a report over this transport has the
    client's own figures only.
    """

    transcripts = False

    def __init__(self) -> None:
        from ..protocols.telephony import TwilioCaller

        self._caller = TwilioCaller(f"MZ{uuid.uuid4().hex}", f"CA{uuid.uuid4().hex}")

    def start(self, sample_rate: int) -> list[str | bytes]:
        from ..protocols.telephony import SAMPLE_RATE

        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"the twilio transport runs at {SAMPLE_RATE} Hz: use --rate {SAMPLE_RATE}")
        return [self._caller.connected(), self._caller.start()]

    def audio(self, samples: np.ndarray) -> list[str | bytes]:
        return [self._caller.media(samples)]

    def mark_played(self, name: str) -> list[str | bytes]:
        return [self._caller.mark(name)]

    def stop(self) -> list[str | bytes]:
        return [self._caller.stop()]

    def receive(self, message: str | bytes) -> list[OutputEvent]:
        from ..protocols.telephony import decode_media

        try:
            data = json.loads(message)
            event = data.get("event")
            if event == "media":
                return [AgentAudio(mulaw_decode(decode_media(data)).astype(np.float32) / 32768.0)]
            if event == "mark":
                return [Mark(str(data["mark"]["name"]))]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return [Error("invalid_message", f"agent sent a message that is not Media Streams: {exc}")]
        if event == "clear":
            return [Clear()]
        return [Error("unknown_type", f"agent sent an unknown event {event!r}")]


class RealtimeClientCodec:
    """The client side of the OpenAI Realtime protocol at ``/v1/realtime`` (see ``docs/realtime.md``).

    PCM16 at 24 kHz, or μ-law at 8 kHz (``--rate 8000``). Add ``?metrics=1`` to
    the URL for the server's own figures. A cancelled response stands for the
    native protocol's ``clear``: the server cancels it the moment the agent stops.
    """

    transcripts = True

    def __init__(self) -> None:
        self._mulaw = False
        self._transcripts: dict[str, str] = {}  # item id -> text so far

    def start(self, sample_rate: int) -> list[str | bytes]:
        if sample_rate == 24000:
            return []
        if sample_rate != 8000:
            raise ValueError("the realtime transport runs at 24000 Hz (PCM16) or 8000 Hz (μ-law)")
        self._mulaw = True
        audio = {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}
        return [json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": audio}})]

    def audio(self, samples: np.ndarray) -> list[str | bytes]:
        data = mulaw_encode(float_to_int16(samples)) if self._mulaw else float_to_pcm16(samples)
        return [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(data).decode()})]

    def mark_played(self, name: str) -> list[str | bytes]:
        return []

    def stop(self) -> list[str | bytes]:
        return []

    def receive(self, message: str | bytes) -> list[OutputEvent]:
        try:
            data = json.loads(message)
            kind = data["type"]
            if kind == "response.output_audio.delta":
                payload = base64.b64decode(data["delta"])
                if self._mulaw:
                    return [AgentAudio(mulaw_decode(payload).astype(np.float32) / 32768.0)]
                return [AgentAudio(pcm16_to_float(payload))]
            if kind in ("response.output_audio_transcript.delta", "conversation.item.input_audio_transcription.delta"):
                role = "agent" if kind.startswith("response.") else "user"
                text = self._transcripts.get(data["item_id"], "") + data["delta"]
                self._transcripts[data["item_id"]] = text
                return [Transcript(role, text, False)]
            if kind == "response.output_audio_transcript.done":
                return [Transcript("agent", data["transcript"], True)]
            if kind == "conversation.item.input_audio_transcription.completed":
                return [Transcript("user", data["transcript"], True)]
            if kind == "response.done" and data["response"]["status"] == "cancelled":
                return [Clear()]
            if kind == "voice_agent.metrics":
                return [Metrics({k: v for k, v in data.items() if k not in ("type", "event_id")})]
            if kind == "error":
                return [Error(str(data["error"].get("code")), str(data["error"].get("message")))]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return [Error("invalid_message", f"agent sent a message that is not Realtime: {exc}")]
        return []  # session, item and response bookkeeping the replay does not measure


CODECS: dict[str, type[ClientCodec]] = {
    "native": NativeClientCodec,
    "twilio": TwilioClientCodec,
    "realtime": RealtimeClientCodec,
}


class ConnectError(Exception):
    """The agent could not be reached or refused the session."""


class Connection:
    """One WebSocket to the agent. Sends codec output; receives raw messages with arrival times."""

    def __init__(self, websocket, codec: ClientCodec):
        self.websocket = websocket
        self.codec = codec

    @classmethod
    async def open(cls, url: str, codec: ClientCodec, sample_rate: int | None, token: str = "") -> Connection:
        import websockets

        headers = {"Authorization": f"Bearer {token}"} if token else None
        try:
            websocket = await websockets.connect(url, max_size=None, open_timeout=10, additional_headers=headers)
        except (TimeoutError, OSError, websockets.InvalidURI, websockets.InvalidHandshake) as exc:
            raise ConnectError(f"cannot connect to {url}: {exc}") from None
        connection = cls(websocket, codec)
        if sample_rate is not None:
            await connection.send(codec.start(sample_rate))
        return connection

    async def send(self, messages: list[str | bytes]) -> None:
        for message in messages:
            await self.websocket.send(message)

    async def receive(self) -> tuple[float, str | bytes] | None:
        """The next message and when it arrived; None once the connection is closed."""
        import websockets

        try:
            message = await self.websocket.recv()
        except websockets.ConnectionClosed:
            return None
        return time.monotonic(), message

    def close_reason(self) -> str:
        code, reason = self.websocket.close_code, self.websocket.close_reason
        return f"connection closed: {code} {reason}".strip() if code is not None else "connection lost"

    async def close(self) -> None:
        await self.websocket.close()


class Pacer:
    """Ticks every ``FRAME_S`` on an absolute schedule, so waits never accumulate drift."""

    def __init__(self, frame_s: float = FRAME_S):
        self.frame_s = frame_s
        self._next = time.monotonic()

    @property
    def due(self) -> float:
        """When the frame to send now is due: its place on the schedule, however late it goes out."""
        return self._next

    async def tick(self) -> None:
        self._next += self.frame_s
        delay = self._next - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -1.0:
            self._next = time.monotonic()  # far behind (a stalled loop): start again, do not burst


async def stream(connection: Connection, audio: np.ndarray, rate: int) -> list[float]:
    """Send ``audio`` in 20 ms frames at real-time pace; returns each frame's send time."""
    frame = int(rate * FRAME_S)
    pacer = Pacer()
    sent = []
    for start in range(0, len(audio), frame):
        await connection.send(connection.codec.audio(audio[start : start + frame]))
        sent.append(time.monotonic())
        await pacer.tick()
    return sent
