"""The OpenAI Realtime protocol (GA) at ``/v1/realtime``: a sans-I/O codec.

Every message is a JSON text frame with a ``type``. The client streams audio
as base64 in ``input_audio_buffer.append``; the server answers with the
Realtime server events (``session.created``, ``input_audio_buffer.*``,
``conversation.item.*``, ``response.*``, ``error``) and, once per turn if
the client asked for it, our own ``voice_agent.server.metrics``. Audio is PCM16 at 24 kHz by default, or G.711
μ-law or A-law at 8 kHz. The session runs at the input rate; output audio at
another rate is resampled here. Where the beta protocol's field names differ
a little (``input_audio_format: "g711_ulaw"``, a flat ``voice`` and
``turn_detection``, ``max_response_output_tokens``, ``modalities``) they are
accepted too. See ``docs/realtime.md``.

The codec holds no socket: the server feeds it what arrived and sends what it
returns. It keeps the conversation's ids: which item a transcript or audio
frame belongs to, and which answer an item id names.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..audio import StreamResampler
from ..printable import printable
from . import realtime_fields as fields
from .client_options import screen_prompt_options, user_text_error
from .events import (
    AgentAudio,
    AudioReceived,
    Error,
    FunctionCall,
    FunctionCallOutput,
    FunctionOutputAdded,
    HistoryMessage,
    HistoryMessageAdded,
    IdleTimeout,
    InputClear,
    InputCleared,
    InputCommit,
    InputEvent,
    ItemDelete,
    ItemDeleted,
    ItemRetrieve,
    ItemRetrieved,
    Metrics,
    OutputEvent,
    ProtocolError,
    ResponseCancel,
    ResponseEnded,
    ResponseRequest,
    ResponseStarted,
    SessionConfig,
    SessionUpdate,
    SpeechStarted,
    Transcript,
    Truncated,
    TruncateRequest,
    TurnCommitted,
    TurnIgnored,
    UserText,
    UserTextAdded,
)
from .realtime_fields import MAX_OUTPUT_CHARS, PCM, AudioFormat, Invalid
from .realtime_json import decode_event
from .strict_json import InvalidJSON

DEFAULT_MODEL = "voice-agent"
METRICS_TYPE = "voice_agent.server.metrics"
MAX_TEXT_CHARS = 2000
# Items whose ids a later event may name (truncate, a merged turn): more than any client keeps unplayed.
REMEMBERED_ITEMS = 64
# The content a message of each role may hold, and where its words are.
_CONTENT_TYPES = {
    "user": ("input_text", "text"),
    "system": ("input_text", "text"),
    "assistant": ("output_text", "text", "output_audio"),
}
MAX_ID_CHARS = 64  # a client's item and event ids, echoed back: longer than the SDKs make


@dataclass
class _Response:
    number: int
    id: str
    item_id: str
    # Fixed when it starts: its audio comes at the session rate of then, whatever the client changes meanwhile.
    format: AudioFormat
    resampler: StreamResampler
    transcript: str = ""  # what the agent said so far, or the heard part once it was interrupted
    calls: list[dict[str, Any]] = field(default_factory=list)  # its function_call items, told after its message


@dataclass
class _UserItem:
    turn: int
    id: str
    audio_start_ms: int
    audio_end_ms: int = 0
    partial: str = ""  # the transcription deltas sent so far


@dataclass
class _Conversation:
    """The ids of what the client sees, in order."""

    last_item: str | None = None
    speaking: _UserItem | None = None  # speech started, not committed yet
    committed: deque[_UserItem] = field(default_factory=deque)  # waiting for their transcripts
    response: _Response | None = None
    responses: OrderedDict[str, int] = field(default_factory=OrderedDict)  # item id -> response number
    user_items: OrderedDict[int, str] = field(default_factory=OrderedDict)  # turn -> item id, recent turns
    items: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)  # recent items, as they stand


class RealtimeProtocol:
    """``metrics``: send ``voice_agent.server.metrics`` once per turn. Off by default: clients that
    validate every server event (the OpenAI Agents SDK) report an unknown type as an error.
    ``allow_client_prompt``: whether ``instructions`` may set the system prompt (``--allow-client-prompt``).
    """

    name = "realtime"  # what session reports and agents call this protocol

    def __init__(self, model: str = "", metrics: bool = False, allow_client_prompt: bool = False) -> None:
        self.model = model or DEFAULT_MODEL
        self.metrics = metrics
        self.allow_client_prompt = allow_client_prompt
        self.input_format = PCM
        self.output_format = PCM
        self.session_rate = PCM.rate  # the rate of the session's audio, both ways
        # Both types are the same WebRTC noise suppression: the client's own is told back while it is on.
        self.noise_reduction = "near_field"
        self._ids = itertools.count(1)
        self.session_id = self._id("sess")
        self._created = False
        self._conversation = _Conversation()

    def opening(self) -> list[InputEvent]:
        """What the session is told before the client says anything: it answers with ``session.created``."""
        return [SessionUpdate(sample_rate=self.input_format.rate)]

    # Client to server.

    def receive_bytes(self, data: bytes) -> list[InputEvent]:
        return [
            ProtocolError("invalid_message", "the Realtime protocol sends JSON text frames only; binary frame dropped")
        ]

    def receive_text(self, text: str) -> list[InputEvent]:
        try:
            message = decode_event(text)
        except InvalidJSON as invalid:
            return [ProtocolError(invalid.code, invalid.message)]
        event_id = message.get("event_id")
        # Echoed in every error about the event: an id longer than any client makes is not echoed at all.
        event_id = event_id if isinstance(event_id, str) and len(event_id) <= MAX_ID_CHARS else ""
        kind = message.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return [ProtocolError("unknown_event", f"unknown event type {printable(kind)}; ignored", event_id)]
        try:
            return handler(self, message, event_id)
        except Invalid as invalid:
            return [ProtocolError(invalid.code, invalid.message, event_id)]

    def _on_session_update(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        session = fields.object_field(message, "session")
        if session.get("type", "realtime") != "realtime":
            raise Invalid("invalid_value", "only realtime sessions are served here, not transcription sessions")
        audio = fields.object_field(session, "audio", required=False)
        audio_in = fields.object_field(audio, "input", required=False)
        audio_out = fields.object_field(audio, "output", required=False)
        errors: list[InputEvent] = []

        def field_of(where: dict[str, Any], name: str, beta: str) -> tuple[bool, Any]:
            if name in where:
                return True, where[name]
            return beta in session, session.get(beta)

        given, value = field_of(audio_in, "format", "input_audio_format")
        input_format = self.input_format
        if given:
            try:
                input_format = fields.audio_format(value)
            except Invalid as invalid:
                errors.append(ProtocolError(invalid.code, f"audio.input.format: {invalid.message}", event_id))
        given, value = field_of(audio_out, "format", "output_audio_format")
        if given:
            try:
                self.output_format = fields.audio_format(value)
            except Invalid as invalid:
                errors.append(ProtocolError(invalid.code, f"audio.output.format: {invalid.message}", event_id))
        update: dict[str, Any] = {}
        if input_format is not self.input_format:
            self.input_format = input_format
            update["sample_rate"] = input_format.rate
        given, value = field_of(audio_out, "voice", "voice")
        if given:
            voice = value.get("id") if isinstance(value, dict) else value
            if isinstance(voice, str) and voice:
                update["voice"] = voice
            else:
                errors.append(ProtocolError("invalid_value", "voice must be a voice name", event_id))
        given, value = field_of(audio_in, "turn_detection", "turn_detection")
        if given:
            try:
                update["turn_detection"] = fields.turn_detection(value)
            except Invalid as invalid:
                errors.append(ProtocolError(invalid.code, f"turn_detection: {invalid.message}", event_id))
        given, value = field_of(audio_in, "noise_reduction", "input_audio_noise_reduction")
        if given:
            try:
                kind = fields.noise_reduction(value)
            except Invalid as invalid:
                errors.append(ProtocolError(invalid.code, f"noise_reduction: {invalid.message}", event_id))
            else:
                update["noise_suppression"] = kind is not None
                self.noise_reduction = kind or self.noise_reduction
        if "instructions" in session:
            instructions, refused = self._instructions(session["instructions"], event_id)
            errors += refused
            if instructions is not None:
                update["instructions"] = instructions
        for name in ("max_output_tokens", "max_response_output_tokens"):
            if name in session:
                try:
                    update["max_output_tokens"] = fields.max_tokens(session[name])
                except Invalid as invalid:
                    errors.append(ProtocolError(invalid.code, invalid.message, event_id))
        for name in ("output_modalities", "modalities"):
            if name in session and not fields.audio_modalities(session[name]):
                errors.append(ProtocolError("unsupported", f"{name}: only audio answers are served", event_id))
        try:
            if "tools" in session:
                update["tools"] = fields.tools(session["tools"])
            if "tool_choice" in session:
                update["tool_choice"] = fields.tool_choice(session["tool_choice"])
        except Invalid as invalid:
            errors.append(ProtocolError(invalid.code, invalid.message, event_id))
            update.pop("tools", None)
        return [*errors, SessionUpdate(event_id=event_id, **update)]

    def _instructions(self, value: Any, event_id: str) -> tuple[str | None, list[ProtocolError]]:
        """Instructions the server lets a client give, or None and the reason why not."""
        options, errors = screen_prompt_options({"system_prompt": value}, self.allow_client_prompt)
        errors = [ProtocolError(e.code, e.message.replace("system_prompt", "instructions"), event_id) for e in errors]
        return options.get("system_prompt"), errors

    def _on_append(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        audio = message.get("audio")
        if not isinstance(audio, str):
            raise Invalid("invalid_value", "input_audio_buffer.append needs a base64 string audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid("invalid_audio", "audio is not valid base64; dropped") from None
        if len(data) % self.input_format.sample_bytes:
            raise Invalid(
                "invalid_audio",
                f"{len(data)} bytes are not whole samples of {self.input_format.type}; dropped",
            )
        if not data:
            return []
        return [AudioReceived(self.input_format.decode(data))]

    def _on_commit(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        return [InputCommit(event_id)]

    def _on_clear(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        return [InputClear(event_id)]

    def _on_item_create(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        item = fields.object_field(message, "item")
        previous = message.get("previous_item_id")
        if previous is not None and previous != self._conversation.last_item:
            raise Invalid("unsupported", "items are added at the end only: previous_item_id must be the last item's")
        kind = item.get("type", "message")
        if kind == "function_call_output":
            return self._on_function_output(item, event_id)
        if kind != "message":
            raise Invalid("unsupported", f"items of type {printable(kind)} are not supported; only messages")
        role = item.get("role")
        if role not in _CONTENT_TYPES:
            raise Invalid("invalid_value", f"a message's role is user, assistant or system, not {printable(role)}")
        if role == "system" and not self.allow_client_prompt:
            raise Invalid("option_not_allowed", "this server does not let clients add system messages; ignored")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise Invalid("invalid_value", f"a {role} message needs a content list")
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in _CONTENT_TYPES[role]:
                raise Invalid("unsupported", f"{role} messages take {' or '.join(_CONTENT_TYPES[role])} content")
            text = part.get("transcript" if kind == "output_audio" else "text")
            if not isinstance(text, str):
                raise Invalid("invalid_value", f"{kind} content needs a string text")
            texts.append(text)
        text = " ".join(" ".join(texts).split())
        if not text:
            raise Invalid("invalid_value", f"the {role} message has no text")
        if len(text) > MAX_TEXT_CHARS:
            raise Invalid("invalid_value", f"the {role} message is over {MAX_TEXT_CHARS} characters")
        if (refused := user_text_error(text)) is not None:
            raise Invalid(refused.code, refused.message)
        if role == "user":
            return [UserText(text, event_id, self._item_id(item))]
        return [HistoryMessage(role, text, event_id, self._item_id(item))]

    def _on_item_delete(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        item_id = message.get("item_id")
        if not isinstance(item_id, str) or item_id not in self._conversation.items:
            raise Invalid("item_not_found", f"no item {printable(item_id)} in the conversation")
        return [ItemDelete(item_id, event_id, self._conversation.responses.get(item_id))]

    def _on_item_retrieve(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        item_id = message.get("item_id")
        if not isinstance(item_id, str) or item_id not in self._conversation.items:
            raise Invalid("item_not_found", f"no item {printable(item_id)} in the conversation")
        return [ItemRetrieve(item_id, event_id)]

    def _on_function_output(self, item: dict[str, Any], event_id: str) -> list[InputEvent]:
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_ID_CHARS:
            raise Invalid(
                "invalid_value",
                f"function_call_output needs the call_id of the call, a string up to {MAX_ID_CHARS} characters",
            )
        if not isinstance(output, str):
            raise Invalid("invalid_value", "function_call_output needs a string output")
        if len(output) > MAX_OUTPUT_CHARS:
            raise Invalid("invalid_value", f"the output is over {MAX_OUTPUT_CHARS} characters")
        if (refused := user_text_error(output)) is not None:
            raise Invalid(refused.code, refused.message.replace("text", "the output", 1))
        return [FunctionCallOutput(call_id, output, event_id, self._item_id(item))]

    def _item_id(self, item: dict[str, Any]) -> str:
        """The client's id for a new item, or one of ours; a client's id is bounded like any echoed value."""
        item_id = item.get("id")
        if item_id is None or item_id == "":
            return self._id("item")
        if not isinstance(item_id, str) or len(item_id) > MAX_ID_CHARS:
            raise Invalid("invalid_value", f"item.id must be a string of at most {MAX_ID_CHARS} characters")
        return item_id

    def _on_item_truncate(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        item_id = message.get("item_id")
        audio_end_ms = message.get("audio_end_ms")
        if not isinstance(item_id, str) or item_id not in self._conversation.responses:
            raise Invalid("item_not_found", f"no assistant item {printable(item_id)} to truncate")
        if isinstance(audio_end_ms, bool) or not isinstance(audio_end_ms, int) or audio_end_ms < 0:
            raise Invalid("invalid_value", "audio_end_ms must be a whole number of milliseconds, 0 or more")
        return [TruncateRequest(self._conversation.responses[item_id], audio_end_ms, event_id)]

    def _on_response_create(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        response = fields.object_field(message, "response", required=False)
        instructions = None
        if response.get("instructions") is not None:
            instructions, refused = self._instructions(response["instructions"], event_id)
            if refused:
                raise Invalid(refused[0].code, f"response.{refused[0].message}")
        max_tokens = None
        for name in ("max_output_tokens", "max_response_output_tokens"):
            if name in response:
                max_tokens = fields.max_tokens(response[name])
        for name in ("output_modalities", "modalities"):
            if name in response and not fields.audio_modalities(response[name]):
                raise Invalid("unsupported", f"{name}: only audio answers are served")
        if response.get("input"):
            raise Invalid("unsupported", "response.input is not supported by this server")
        if response.get("conversation", "auto") != "auto":
            raise Invalid("unsupported", "only responses in the default conversation are supported")
        tools = fields.tools(response["tools"]) if "tools" in response else None
        choice = fields.tool_choice(response["tool_choice"]) if "tool_choice" in response else None
        return [ResponseRequest(event_id, instructions, max_tokens, tools, choice)]

    def _on_response_cancel(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        return [ResponseCancel(event_id)]

    def _unsupported(self, message: dict[str, Any], event_id: str) -> list[InputEvent]:
        raise Invalid("unsupported", f"{message['type']} is not supported by this server")

    # Server to client.

    def send(self, event: OutputEvent) -> list[str] | None:
        renderer = _RENDERERS.get(type(event))
        if renderer is None:
            return None  # Clear and Mark: the Realtime client learns of a barge-in from speech_started
        messages = renderer(self, event)
        return messages or None

    def _render_audio(self, event: AgentAudio) -> list[str]:
        response = self._conversation.response
        if response is None:
            return []
        samples = response.resampler.process(event.samples)
        if not len(samples):
            return []
        delta = base64.b64encode(response.format.encode(samples)).decode("ascii")
        return [self._event("response.output_audio.delta", **self._part(response), delta=delta)]

    def _render_transcript(self, event: Transcript) -> list[str]:
        c = self._conversation
        if event.role == "agent":
            response = c.response
            if response is None:
                return []
            if event.final:
                response.transcript = event.text  # the heard part, if it was interrupted
                return []
            delta = event.text[len(response.transcript) :] if event.text.startswith(response.transcript) else ""
            response.transcript = event.text
            if not delta:
                return []
            return [self._event("response.output_audio_transcript.delta", **self._part(response), delta=delta)]
        if not event.final:
            item = c.speaking
            # A delta only adds text: a partial that rewrites earlier words waits for the final transcript.
            if item is None or not event.text.startswith(item.partial) or event.text == item.partial:
                return []
            delta, item.partial = event.text[len(item.partial) :], event.text
            return [
                self._event(
                    "conversation.item.input_audio_transcription.delta", item_id=item.id, content_index=0, delta=delta
                )
            ]
        if not c.committed:
            return []
        return [self._transcription_completed(c.committed.popleft(), event.text)]

    def _transcription_completed(self, item: _UserItem, transcript: str) -> str:
        if (kept := self._conversation.items.get(item.id)) is not None:
            kept["content"][0]["transcript"] = transcript
        seconds = max(0, item.audio_end_ms - item.audio_start_ms) / 1000.0
        return self._event(
            "conversation.item.input_audio_transcription.completed",
            item_id=item.id,
            content_index=0,
            transcript=transcript,
            usage={"type": "duration", "seconds": seconds},
        )

    def _render_speech_started(self, event: SpeechStarted) -> list[str]:
        c = self._conversation
        messages = []
        if c.speaking is not None:  # the turn before it was merged into this one
            messages.append(self._event("conversation.item.deleted", item_id=c.speaking.id))
        c.speaking = _UserItem(event.turn, self._id("item"), event.audio_start_ms)
        messages.append(
            self._event("input_audio_buffer.speech_started", audio_start_ms=event.audio_start_ms, item_id=c.speaking.id)
        )
        return messages

    def _render_committed(self, event: TurnCommitted) -> list[str]:
        c = self._conversation
        item = c.speaking if c.speaking is not None and c.speaking.turn == event.turn else None
        messages = []
        if item is None:  # committed by the client, without speech_started (turn_detection null)
            item = _UserItem(event.turn, self._id("item"), 0)
        else:
            messages.append(
                self._event("input_audio_buffer.speech_stopped", audio_end_ms=event.audio_end_ms, item_id=item.id)
            )
        c.speaking = None
        item.audio_end_ms = event.audio_end_ms
        c.committed.append(item)
        c.user_items[item.turn] = item.id
        while len(c.user_items) > REMEMBERED_ITEMS:
            c.user_items.popitem(last=False)
        messages.append(self._event("input_audio_buffer.committed", item_id=item.id, previous_item_id=c.last_item))
        return messages + self._added(_message(item.id, "user", {"type": "input_audio", "transcript": None}))

    def _render_ignored(self, event: TurnIgnored) -> list[str]:
        c = self._conversation
        item = next((i for i in c.committed if i.turn == event.turn), None)
        if item is not None:
            c.committed.remove(item)
        if event.merged:  # its audio and words are the next turn's now, even if its transcript was sent
            item_id = c.user_items.pop(event.turn, None)
            c.items.pop(item_id or "", None)
            return [] if item_id is None else [self._event("conversation.item.deleted", item_id=item_id)]
        return [] if item is None else [self._transcription_completed(item, "")]

    def _render_cleared(self, event: InputCleared) -> list[str]:
        self._conversation.speaking = None
        return [self._event("input_audio_buffer.cleared")]

    def _render_idle_timeout(self, event: IdleTimeout) -> list[str]:
        # The reference commits the silent buffer as an empty user item here; we add none, and the item
        # id names the moment only.
        return [
            self._event(
                "input_audio_buffer.timeout_triggered",
                audio_start_ms=event.audio_ms,
                audio_end_ms=event.audio_ms,
                item_id=self._id("item"),
            )
        ]

    def _render_text_added(self, event: UserTextAdded) -> list[str]:
        item_id = event.item_id or self._id("item")
        return self._added(_message(item_id, "user", {"type": "input_text", "text": event.text}))

    def _render_history_message(self, event: HistoryMessageAdded) -> list[str]:
        part_type = "output_text" if event.role == "assistant" else "input_text"
        item_id = event.item_id or self._id("item")
        return self._added(_message(item_id, event.role, {"type": part_type, "text": event.text}))

    def _render_deleted(self, event: ItemDeleted) -> list[str]:
        c = self._conversation
        c.items.pop(event.item_id, None)
        c.responses.pop(event.item_id, None)
        if c.last_item == event.item_id:
            c.last_item = next(reversed(c.items), None)
        return [self._event("conversation.item.deleted", item_id=event.item_id)]

    def _render_retrieved(self, event: ItemRetrieved) -> list[str]:
        item = self._conversation.items.get(event.item_id)
        if item is None:
            return self._render_error(Error("item_not_found", "that item is no longer known", event.event_id))
        return [self._event("conversation.item.retrieved", item=item)]

    def _added(self, item: dict[str, Any]) -> list[str]:
        """A new item at the end of the conversation: added and done at once."""
        c = self._conversation
        previous, c.last_item = c.last_item, item["id"]
        self._keep(item)
        return [
            self._event("conversation.item.added", item=item, previous_item_id=previous),
            self._event("conversation.item.done", item=item, previous_item_id=previous),
        ]

    def _keep(self, item: dict[str, Any]) -> None:
        """``item`` as conversation.item.retrieve tells it, for a while."""
        items = self._conversation.items
        items[item["id"]] = item
        items.move_to_end(item["id"])
        while len(items) > REMEMBERED_ITEMS:
            items.popitem(last=False)

    def _render_response_started(self, event: ResponseStarted) -> list[str]:
        c = self._conversation
        response = _Response(
            event.response,
            self._id("resp"),
            self._id("item"),
            self.output_format,
            StreamResampler(self.session_rate, self.output_format.rate),
        )
        c.response = response
        c.responses[response.item_id] = response.number
        while len(c.responses) > REMEMBERED_ITEMS:
            c.responses.popitem(last=False)
        previous, c.last_item = c.last_item, response.item_id
        item = self._assistant_item(response, "in_progress", content=[])
        self._keep(item)
        return [
            self._event("response.created", response=self._response_object(response, "in_progress", [])),
            self._event("response.output_item.added", response_id=response.id, output_index=0, item=item),
            self._event("conversation.item.added", item=item, previous_item_id=previous),
            self._event(
                "response.content_part.added", **self._part(response), part={"type": "audio", "transcript": ""}
            ),
        ]

    def _render_response_ended(self, event: ResponseEnded) -> list[str]:
        c = self._conversation
        response = c.response
        if response is None or response.number != event.response:
            return []
        c.response = None
        status = event.status if event.status in ("completed", "cancelled", "failed") else "failed"
        item = self._assistant_item(
            response,
            "completed" if status == "completed" else "incomplete",
            content=[{"type": "output_audio", "transcript": response.transcript}],
        )
        part = {"type": "audio", "transcript": response.transcript}
        self._keep(item)
        return [
            self._event("response.output_audio.done", **self._part(response)),
            self._event(
                "response.output_audio_transcript.done", **self._part(response), transcript=response.transcript
            ),
            self._event("response.content_part.done", **self._part(response), part=part),
            self._event("response.output_item.done", response_id=response.id, output_index=0, item=item),
            self._event("conversation.item.done", item=item),
            *self._function_call_items(response),
            self._event(
                "response.done",
                response=self._response_object(response, status, [item, *response.calls], reason=event.reason),
            ),
        ]

    def _render_function_call(self, event: FunctionCall) -> list[str]:
        """Kept for the response's end: its function_call items follow its message, done first."""
        response = self._conversation.response
        if response is not None and response.number == event.response:
            response.calls.append(
                {
                    "id": self._id("item"),
                    "object": "realtime.item",
                    "type": "function_call",
                    "status": "completed",
                    "name": event.name,
                    "call_id": event.call_id,
                    "arguments": event.arguments,
                }
            )
        return []

    def _function_call_items(self, response: _Response) -> list[str]:
        messages = []
        for output_index, item in enumerate(response.calls, start=1):
            where = {"response_id": response.id, "item_id": item["id"], "output_index": output_index}
            in_progress = {**item, "status": "in_progress", "arguments": ""}
            c = self._conversation
            previous, c.last_item = c.last_item, item["id"]
            self._keep(item)
            call = {"call_id": item["call_id"]}
            messages += [
                self._event(
                    "response.output_item.added", response_id=response.id, output_index=output_index, item=in_progress
                ),
                self._event("conversation.item.added", item=in_progress, previous_item_id=previous),
                # The arguments come whole: the LLM stream's tool calls are assembled before they are handed on.
                self._event("response.function_call_arguments.delta", **where, **call, delta=item["arguments"]),
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    **call,
                    name=item["name"],
                    arguments=item["arguments"],
                ),
                self._event("response.output_item.done", response_id=response.id, output_index=output_index, item=item),
                self._event("conversation.item.done", item=item),
            ]
        return messages

    def _render_function_output(self, event: FunctionOutputAdded) -> list[str]:
        item = {
            "id": event.item_id or self._id("item"),
            "object": "realtime.item",
            "type": "function_call_output",
            "status": "completed",
            "call_id": event.call_id,
            "output": event.output,
        }
        return self._added(item)

    def _render_truncated(self, event: Truncated) -> list[str]:
        item_id = next((i for i, n in self._conversation.responses.items() if n == event.response), None)
        if item_id is None:
            return []
        if (kept := self._conversation.items.get(item_id)) is not None and kept["content"]:
            kept["content"][0]["transcript"] = event.text
        return [
            self._event(
                "conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=event.audio_end_ms
            )
        ]

    def _render_config(self, event: SessionConfig) -> list[str]:
        self.session_rate = event.sample_rate
        kind = "session.updated" if self._created else "session.created"
        self._created = True
        return [self._event(kind, session=self._session_object(event))]

    def _render_metrics(self, event: Metrics) -> list[str]:
        return [self._event(METRICS_TYPE, **event.values)] if self.metrics else []

    def _render_error(self, event: Error) -> list[str]:
        server_side = event.code in ("stt_failed", "reply_failed", "internal_error")
        error = {
            "type": "server_error" if server_side else "invalid_request_error",
            "code": event.code,
            "message": event.message,
            "param": None,
            "event_id": event.event_id or None,
        }
        return [self._event("error", error=error)]

    # Wire objects.

    def _session_object(self, config: SessionConfig) -> dict[str, Any]:
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.session_id,
            "model": self.model,
            "output_modalities": ["audio"],
            "instructions": config.instructions,
            "tools": [fields.realtime_tool(schema) for schema in config.tools],
            "tool_choice": fields.realtime_tool_choice(config.tool_choice),
            "max_output_tokens": config.max_output_tokens or "inf",
            "tracing": None,
            "truncation": "auto",
            "prompt": None,
            "audio": {
                "input": {
                    "format": self.input_format.describe(),
                    "transcription": {"model": "whisper"},
                    "noise_reduction": {"type": self.noise_reduction} if config.noise_suppression else None,
                    "turn_detection": fields.describe_turn_detection(config.turn_detection),
                },
                "output": {"format": self.output_format.describe(), "voice": config.voice, "speed": 1.0},
            },
        }

    def _response_object(
        self, response: _Response, status: str, output: list[dict[str, Any]], reason: str = ""
    ) -> dict[str, Any]:
        details = None
        if status != "in_progress" and status != "completed":
            details = {"type": status, "reason": reason or None}
        return {
            "id": response.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": output,
            "conversation_id": "conv_" + self.session_id.removeprefix("sess_"),
            "output_modalities": ["audio"],
            "audio": {"output": {"format": response.format.describe()}},
            "usage": None,
        }

    def _assistant_item(self, response: _Response, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": response.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    @staticmethod
    def _part(response: _Response) -> dict[str, Any]:
        return {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "event_id": self._id("event"), **fields}, separators=(",", ":"))

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"


def _message(item_id: str, role: str, part: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [part],
    }


_HANDLERS: dict[str, Callable[[RealtimeProtocol, dict[str, Any], str], list[InputEvent]]] = {
    "session.update": RealtimeProtocol._on_session_update,
    "input_audio_buffer.append": RealtimeProtocol._on_append,
    "input_audio_buffer.commit": RealtimeProtocol._on_commit,
    "input_audio_buffer.clear": RealtimeProtocol._on_clear,
    "conversation.item.create": RealtimeProtocol._on_item_create,
    "conversation.item.truncate": RealtimeProtocol._on_item_truncate,
    "conversation.item.delete": RealtimeProtocol._on_item_delete,
    "conversation.item.retrieve": RealtimeProtocol._on_item_retrieve,
    "output_audio_buffer.clear": RealtimeProtocol._unsupported,
    "response.create": RealtimeProtocol._on_response_create,
    "response.cancel": RealtimeProtocol._on_response_cancel,
}

_RENDERERS: dict[type, Callable[[RealtimeProtocol, Any], list[str]]] = {
    AgentAudio: RealtimeProtocol._render_audio,
    Transcript: RealtimeProtocol._render_transcript,
    SpeechStarted: RealtimeProtocol._render_speech_started,
    TurnCommitted: RealtimeProtocol._render_committed,
    TurnIgnored: RealtimeProtocol._render_ignored,
    InputCleared: RealtimeProtocol._render_cleared,
    IdleTimeout: RealtimeProtocol._render_idle_timeout,
    UserTextAdded: RealtimeProtocol._render_text_added,
    ResponseStarted: RealtimeProtocol._render_response_started,
    ResponseEnded: RealtimeProtocol._render_response_ended,
    Truncated: RealtimeProtocol._render_truncated,
    FunctionCall: RealtimeProtocol._render_function_call,
    FunctionOutputAdded: RealtimeProtocol._render_function_output,
    HistoryMessageAdded: RealtimeProtocol._render_history_message,
    ItemRetrieved: RealtimeProtocol._render_retrieved,
    ItemDeleted: RealtimeProtocol._render_deleted,
    SessionConfig: RealtimeProtocol._render_config,
    Metrics: RealtimeProtocol._render_metrics,
    Error: RealtimeProtocol._render_error,
}
