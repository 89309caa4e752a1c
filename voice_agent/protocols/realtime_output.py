"""The Realtime codec's output: session output events to server events (JSON text frames)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from ..audio import StreamResampler
from . import realtime_fields as fields
from .events import (
    AgentAudio,
    Error,
    FunctionCall,
    FunctionOutputAdded,
    HistoryMessageAdded,
    IdleTimeout,
    InputCleared,
    ItemDeleted,
    ItemRetrieved,
    Metrics,
    OutputEvent,
    ResponseEnded,
    ResponseStarted,
    SessionConfig,
    SpeechStarted,
    Transcript,
    Truncated,
    TurnCommitted,
    TurnIgnored,
    UserTextAdded,
)
from .realtime_conversation import REMEMBERED_ITEMS, RealtimeCodecState, Response, UserItem

METRICS_TYPE = "voice_agent.metrics"


class RealtimeOutput(RealtimeCodecState):
    """Renders what the session says; ``send`` dispatches on the event's type."""

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

    def _transcription_completed(self, item: UserItem, transcript: str) -> str:
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
        c.speaking = UserItem(event.turn, self._id("item"), event.audio_start_ms)
        messages.append(
            self._event("input_audio_buffer.speech_started", audio_start_ms=event.audio_start_ms, item_id=c.speaking.id)
        )
        return messages

    def _render_committed(self, event: TurnCommitted) -> list[str]:
        c = self._conversation
        item = c.speaking if c.speaking is not None and c.speaking.turn == event.turn else None
        messages = []
        if item is None:  # committed by the client, without speech_started (turn_detection null)
            item = UserItem(event.turn, self._id("item"), 0)
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
        response = Response(
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

    def _function_call_items(self, response: Response) -> list[str]:
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
        self, response: Response, status: str, output: list[dict[str, Any]], reason: str = ""
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

    def _assistant_item(self, response: Response, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": response.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    @staticmethod
    def _part(response: Response) -> dict[str, Any]:
        return {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "event_id": self._id("event"), **fields}, separators=(",", ":"))


def _message(item_id: str, role: str, part: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [part],
    }


_RENDERERS: dict[type, Callable[[RealtimeOutput, Any], list[str]]] = {
    AgentAudio: RealtimeOutput._render_audio,
    Transcript: RealtimeOutput._render_transcript,
    SpeechStarted: RealtimeOutput._render_speech_started,
    TurnCommitted: RealtimeOutput._render_committed,
    TurnIgnored: RealtimeOutput._render_ignored,
    InputCleared: RealtimeOutput._render_cleared,
    IdleTimeout: RealtimeOutput._render_idle_timeout,
    UserTextAdded: RealtimeOutput._render_text_added,
    ResponseStarted: RealtimeOutput._render_response_started,
    ResponseEnded: RealtimeOutput._render_response_ended,
    Truncated: RealtimeOutput._render_truncated,
    FunctionCall: RealtimeOutput._render_function_call,
    FunctionOutputAdded: RealtimeOutput._render_function_output,
    HistoryMessageAdded: RealtimeOutput._render_history_message,
    ItemRetrieved: RealtimeOutput._render_retrieved,
    ItemDeleted: RealtimeOutput._render_deleted,
    SessionConfig: RealtimeOutput._render_config,
    Metrics: RealtimeOutput._render_metrics,
    Error: RealtimeOutput._render_error,
}
