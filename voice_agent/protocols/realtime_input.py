"""The Realtime codec's input: client events (JSON text frames) to session input events."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from ..printable import printable
from . import realtime_fields as fields
from .client_options import screen_prompt_options, user_text_error
from .events import (
    AudioReceived,
    FunctionCallOutput,
    HistoryMessage,
    InputClear,
    InputCommit,
    InputEvent,
    ItemDelete,
    ItemRetrieve,
    ProtocolError,
    ResponseCancel,
    ResponseRequest,
    SessionUpdate,
    TruncateRequest,
    UserText,
)
from .realtime_conversation import MAX_ID_CHARS, RealtimeCodecState
from .realtime_fields import MAX_OUTPUT_CHARS, Invalid
from .realtime_json import decode_event
from .strict_json import InvalidJSON

MAX_TEXT_CHARS = 2000
# The content a message of each role may hold, and where its words are.
_CONTENT_TYPES = {
    "user": ("input_text", "text"),
    "system": ("input_text", "text"),
    "assistant": ("output_text", "text", "output_audio"),
}


class RealtimeInput(RealtimeCodecState):
    """Reads what the client sent; ``receive_text`` dispatches on the event's ``type``."""

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


_HANDLERS: dict[str, Callable[[RealtimeInput, dict[str, Any], str], list[InputEvent]]] = {
    "session.update": RealtimeInput._on_session_update,
    "input_audio_buffer.append": RealtimeInput._on_append,
    "input_audio_buffer.commit": RealtimeInput._on_commit,
    "input_audio_buffer.clear": RealtimeInput._on_clear,
    "conversation.item.create": RealtimeInput._on_item_create,
    "conversation.item.truncate": RealtimeInput._on_item_truncate,
    "conversation.item.delete": RealtimeInput._on_item_delete,
    "conversation.item.retrieve": RealtimeInput._on_item_retrieve,
    "output_audio_buffer.clear": RealtimeInput._unsupported,
    "response.create": RealtimeInput._on_response_create,
    "response.cancel": RealtimeInput._on_response_cancel,
}
