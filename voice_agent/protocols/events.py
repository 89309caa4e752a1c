"""Events that protocol codecs produce and consume.

A codec turns wire messages into the input events below and output events
into wire messages. The session only ever sees these, so one session
implementation serves every wire format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Input events: client to session.


@dataclass(frozen=True)
class SessionStarted:
    """The client fixed the session's sample rate and options."""

    sample_rate: int
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AudioReceived:
    """Caller audio, float32 mono at the session rate."""

    samples: np.ndarray


@dataclass(frozen=True)
class MarkPlayed:
    """The client played (or dropped on clear) all audio sent before this mark."""

    name: str


@dataclass(frozen=True)
class TextReceived:
    """Text that enters the conversation as if the user had said it (typed text, DTMF)."""

    text: str


@dataclass(frozen=True)
class StreamStopped:
    """The client ended the stream on purpose."""


@dataclass(frozen=True)
class ProtocolError:
    """A message that could not be used. The session reports it and goes on."""

    code: str
    message: str


InputEvent = SessionStarted | AudioReceived | MarkPlayed | TextReceived | StreamStopped | ProtocolError

# Output events: session to client.


@dataclass(frozen=True)
class AgentAudio:
    """Agent speech, float32 mono at the session rate; one paced frame."""

    samples: np.ndarray


@dataclass(frozen=True)
class Transcript:
    role: str  # "user" or "agent"
    text: str
    final: bool


@dataclass(frozen=True)
class Clear:
    """Drop every bit of agent audio not played yet."""


@dataclass(frozen=True)
class Mark:
    """Sent after a chunk's audio; the client echoes it once that audio has played."""

    name: str


@dataclass(frozen=True)
class Metrics:
    values: dict[str, Any]


@dataclass(frozen=True)
class Error:
    code: str
    message: str


@dataclass(frozen=True)
class CallEnded:
    """The agent ended the call (its ``end_call`` tool): the session's last event; the connection then closes."""

    reason: str = ""


@dataclass(frozen=True)
class CallTransferred:
    """The agent hands the call to ``to`` (its ``transfer_call`` tool); a /ws client acts on it."""

    to: str


OutputEvent = AgentAudio | Transcript | Clear | Mark | Metrics | Error | CallEnded | CallTransferred
