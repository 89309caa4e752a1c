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
class StreamRefused:
    """The stream failed a check it cannot go on without (a phone call that is not the one it claims):
    the connection closes it with ``reason``, and the session sees nothing of it."""

    reason: str


@dataclass(frozen=True)
class ProtocolError:
    """A message that could not be used. The session reports it and goes on."""

    code: str
    message: str
    event_id: str = ""  # the client's id for the message, where its protocol has one


# Turn-taking modes a client can choose (the Realtime protocol's ``turn_detection``).
SERVER_VAD = "server_vad"  # silence ends the turn; a transcript-aware silence unless the client sets one
SEMANTIC_VAD = "semantic_vad"  # the transcript-aware silences, scaled by an eagerness
MANUAL = "manual"  # the client commits each turn and asks for each answer


@dataclass(frozen=True)
class TurnDetection:
    """How a session ends user turns. None fields keep the server's settings."""

    mode: str = SERVER_VAD
    silence_ms: int | None = None  # SERVER_VAD: silence after words that give no hint
    prefix_padding_ms: int | None = None  # audio kept before detected speech
    threshold: float | None = None  # VAD speech probability
    eagerness: str = "auto"  # SEMANTIC_VAD: "low", "medium", "high" or "auto"
    create_response: bool = True  # answer each committed turn
    interrupt_response: bool = True  # speech over the agent may interrupt it
    idle_timeout_ms: int | None = None  # SERVER_VAD: silence after an answer past which the agent speaks again


NO_TOKEN_LIMIT = 0


# Functions the client runs itself are declared as OpenAI chat tools, ``{"type": "function", "function":
# {"name", "description", "parameters"}}``, and chosen with a chat ``tool_choice``: "auto", "none",
# "required", or ``{"type": "function", "function": {"name": ...}}``.
ToolSchemas = tuple[dict[str, Any], ...]
ToolChoice = str | dict[str, Any]
AUTO = "auto"


def names_of(schemas: ToolSchemas) -> set[str]:
    return {schema["function"]["name"] for schema in schemas}


def chosen_name(choice: ToolChoice) -> str | None:
    """The function a ``tool_choice`` forces, if it names one."""
    return choice["function"]["name"] if isinstance(choice, dict) else None


@dataclass(frozen=True)
class SessionUpdate:
    """The client changes this session's settings; None leaves a setting as it is."""

    event_id: str = ""
    sample_rate: int | None = None
    instructions: str | None = None
    voice: str | None = None
    turn_detection: TurnDetection | None = None
    max_output_tokens: int | None = None  # NO_TOKEN_LIMIT: the server's own limit
    tools: ToolSchemas | None = None  # the client's functions, for every answer
    tool_choice: ToolChoice | None = None
    noise_suppression: bool | None = None  # WebRTC's noise suppression on this session's input


@dataclass(frozen=True)
class InputCommit:
    """End the user's turn now (in MANUAL mode: the audio since the last commit or clear)."""

    event_id: str = ""


@dataclass(frozen=True)
class InputClear:
    """Forget the user's audio not committed yet."""

    event_id: str = ""


@dataclass(frozen=True)
class UserText:
    """Typed user text that joins the conversation and is answered by the next ResponseRequest."""

    text: str
    event_id: str = ""
    item_id: str = ""  # the codec's id for the item, told back in UserTextAdded


@dataclass(frozen=True)
class ResponseRequest:
    """Answer now: the user input not answered yet, or the history alone."""

    event_id: str = ""
    instructions: str | None = None  # this answer's system prompt instead of the session's
    max_output_tokens: int | None = None
    tools: ToolSchemas | None = None  # this answer's instead of the session's
    tool_choice: ToolChoice | None = None


@dataclass(frozen=True)
class HistoryMessage:
    """A system or assistant message the client adds to the history as it stands (no answer follows)."""

    role: str  # "system" or "assistant"
    text: str
    event_id: str = ""
    item_id: str = ""  # the codec's id for the item, told back in HistoryMessageAdded


@dataclass(frozen=True)
class ItemRetrieve:
    """The client asks for an item of the conversation again; the codec knows it."""

    item_id: str
    event_id: str = ""


@dataclass(frozen=True)
class ItemDelete:
    """The client takes an item out of the conversation."""

    item_id: str
    event_id: str = ""
    response: int | None = None  # the answer the item is, if it is one


@dataclass(frozen=True)
class FunctionCallOutput:
    """The result of a function call the client ran (FunctionCall), for the history."""

    call_id: str
    output: str
    event_id: str = ""
    item_id: str = ""  # the codec's id for the item, told back in FunctionOutputAdded


@dataclass(frozen=True)
class ResponseCancel:
    event_id: str = ""


@dataclass(frozen=True)
class TruncateRequest:
    """The client played only ``audio_end_ms`` of answer ``response``: keep only those words."""

    response: int
    audio_end_ms: int
    event_id: str = ""


InputEvent = (
    SessionStarted
    | AudioReceived
    | MarkPlayed
    | TextReceived
    | StreamStopped
    | StreamRefused
    | ProtocolError
    | SessionUpdate
    | InputCommit
    | InputClear
    | UserText
    | ResponseRequest
    | ResponseCancel
    | TruncateRequest
    | FunctionCallOutput
    | HistoryMessage
    | ItemRetrieve
    | ItemDelete
)

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
class AgentState:
    """What the agent does now, told each time it changes: "listening", "thinking" (a turn is committed, its
    answer is being prepared) or "speaking" (its answer is the one the user hears, paused or not)."""

    state: str


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
    event_id: str = ""  # the client message it answers, if any


@dataclass(frozen=True)
class CallEnded:
    """The agent ended the call (its ``end_call`` tool): the session's last event; the connection then closes."""

    reason: str = ""


@dataclass(frozen=True)
class CallTransferred:
    """The agent hands the call to ``to`` (its ``transfer_call`` tool); a /ws client acts on it."""

    to: str


# Output events that only some protocols speak (the Realtime protocol); the others ignore them.


@dataclass(frozen=True)
class SessionConfig:
    """The session's settings in effect, after it started and after each SessionUpdate."""

    instructions: str
    voice: str
    turn_detection: TurnDetection
    max_output_tokens: int  # NO_TOKEN_LIMIT: the server's own limit
    sample_rate: int
    tools: ToolSchemas = ()
    tool_choice: ToolChoice = AUTO
    noise_suppression: bool = False


@dataclass(frozen=True)
class SpeechStarted:
    """A user turn began: new speech, or speech over the agent that interrupts it."""

    turn: int
    audio_start_ms: int  # in the session's audio, including the padding kept before the speech


@dataclass(frozen=True)
class TurnCommitted:
    """The user's turn ended; its final transcript follows, or TurnIgnored."""

    turn: int
    audio_end_ms: int


@dataclass(frozen=True)
class TurnIgnored:
    """A committed turn had no words (a cough, a door), or was ``merged`` into the next: nothing answers it."""

    turn: int
    merged: bool = False  # the user went on before the answer began: its audio belongs to the next turn


@dataclass(frozen=True)
class InputCleared:
    pass


@dataclass(frozen=True)
class IdleTimeout:
    """The user said nothing for ``idle_timeout_ms`` after an answer: a response follows, to prompt them."""

    audio_ms: int  # where the session's audio is


@dataclass(frozen=True)
class UserTextAdded:
    text: str
    item_id: str = ""  # UserText's


@dataclass(frozen=True)
class ResponseStarted:
    """An answer begins to play: its agent transcripts and audio follow, then ResponseEnded."""

    response: int


COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"  # how a response ended (ResponseEnded.status)
# Why an answer was cancelled (ResponseEnded.reason).
TURN_DETECTED = "turn_detected"  # the user took a turn: speech, typed text
CLIENT_CANCELLED = "client_cancelled"  # the client cancelled it (response.cancel)


@dataclass(frozen=True)
class ResponseEnded:
    response: int
    status: str  # COMPLETED, CANCELLED or FAILED
    reason: str = ""  # for "cancelled": TURN_DETECTED or CLIENT_CANCELLED


@dataclass(frozen=True)
class HistoryMessageAdded:
    role: str
    text: str
    item_id: str = ""  # HistoryMessage's


@dataclass(frozen=True)
class ItemDeleted:
    item_id: str


@dataclass(frozen=True)
class ItemRetrieved:
    item_id: str
    event_id: str = ""


@dataclass(frozen=True)
class FunctionCall:
    """Answer ``response`` asks the client to run a function; sent before its ResponseEnded."""

    response: int
    call_id: str
    name: str
    arguments: str  # JSON, as the model wrote it


@dataclass(frozen=True)
class FunctionOutputAdded:
    """The output of a function call is in the history."""

    call_id: str
    output: str
    item_id: str = ""  # FunctionCallOutput's


@dataclass(frozen=True)
class Truncated:
    """Answer ``response`` now holds in the history only the words before ``audio_end_ms``."""

    response: int
    audio_end_ms: int
    text: str


OutputEvent = (
    AgentAudio
    | Transcript
    | Clear
    | AgentState
    | Mark
    | Metrics
    | Error
    | SessionConfig
    | SpeechStarted
    | TurnCommitted
    | TurnIgnored
    | InputCleared
    | IdleTimeout
    | UserTextAdded
    | ResponseStarted
    | ResponseEnded
    | Truncated
    | FunctionCall
    | FunctionOutputAdded
    | HistoryMessageAdded
    | ItemDeleted
    | ItemRetrieved
    | CallEnded
    | CallTransferred
)
