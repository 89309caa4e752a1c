"""The conversation's items a Realtime client acts on by id: it may truncate an answer to what it played,
delete an answer, a message it added or text still waiting for a response, retrieve one, add messages to the
history, and give its functions' outputs (client_tools.py). The user input waiting for a response (typed
text, turns the client commits or answers itself) is held here too."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Settings
from ..engines.llm.base import Message
from ..printable import printable
from ..protocols.events import (
    Error,
    FunctionCallOutput,
    FunctionOutputAdded,
    HistoryMessage,
    HistoryMessageAdded,
    ItemDelete,
    ItemDeleted,
    ItemRetrieve,
    ItemRetrieved,
    OutputEvent,
    Truncated,
    TruncateRequest,
    UserText,
    UserTextAdded,
)
from ..reply.pipeline import Reply
from .client_tools import ClientCalls
from .conversation import Conversation

REMEMBERED_ANSWERS = 64  # answers a client may still truncate
CONVERSATION_ITEM_EVENTS = (UserText, TruncateRequest, FunctionCallOutput, HistoryMessage, ItemRetrieve, ItemDelete)


@dataclass
class _Spoken:
    """An answer a client may truncate to what it played."""

    reply: Reply
    message: Message | None = None  # its message in the history, once remembered
    cut_s: float | None = None  # a truncation that came while it still played


class ConversationItems:
    def __init__(self, conversation: Conversation, emit: Callable[[OutputEvent], None], settings: Settings):
        self._conversation = conversation
        self._emit = emit
        self._settings = settings
        self.calls = ClientCalls()
        self._waiting: list[asyncio.Future[str]] = []  # user input not answered yet: text, committed turns
        # Items the client may delete: text waiting for a response, and the messages it added, by item id.
        self._texts: OrderedDict[str, asyncio.Future[str]] = OrderedDict()
        self._messages: OrderedDict[str, Message] = OrderedDict()
        self._spoken: OrderedDict[int, _Spoken] = OrderedDict()

    def handle(
        self, event: UserText | TruncateRequest | FunctionCallOutput | HistoryMessage | ItemRetrieve | ItemDelete
    ) -> None:
        """One of ``CONVERSATION_ITEM_EVENTS``."""
        if isinstance(event, UserText):
            self._on_text(event)
        elif isinstance(event, TruncateRequest):
            self._on_truncate(event)
        elif isinstance(event, FunctionCallOutput):
            self._on_function_output(event)
        elif isinstance(event, HistoryMessage):
            # Into the history at once, before any user text still waiting for a response.
            message = {"role": event.role, "content": event.text}
            self._conversation.history.append(message)
            _keep_recent(self._messages, event.item_id, message)
            self._emit(HistoryMessageAdded(event.role, event.text, event.item_id))
        elif isinstance(event, ItemRetrieve):
            self._emit(ItemRetrieved(event.item_id, event.event_id))
        else:
            self._on_delete(event)

    def _on_text(self, event: UserText) -> None:
        """Typed text waits for a response: a bounded number of items, and of characters, so a client cannot
        pile up work (and memory) the next answer would take all at once. Deletable by its item id until then."""
        settings = self._settings
        if 0 < settings.max_pending_items <= len(self._waiting):
            message = f"{len(self._waiting)} items already wait for a response; ask for one first. Ignored"
            self._emit(Error("too_many_pending_items", message, event.event_id))
            return
        waiting = sum(len(item.result()) for item in self._ready())
        if 0 < settings.max_pending_chars < waiting + len(event.text):
            message = f"over {settings.max_pending_chars} characters of text would wait for a response. Ignored"
            self._emit(Error("pending_text_too_long", message, event.event_id))
            return
        _keep_recent(self._texts, event.item_id, self.add_text(event.text))
        self._emit(UserTextAdded(event.text, event.item_id))

    def _ready(self) -> list[asyncio.Future[str]]:
        """User input waiting for an answer whose words are known already."""
        return [item for item in self._waiting if item.done() and not item.cancelled() and item.exception() is None]

    def add_text(self, text: str) -> asyncio.Future[str]:
        """User words the client will ask a response to (typed text, a turn it answers itself)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.set_result(text)
        return self.wait(future)

    def wait(self, text: asyncio.Future[str]) -> asyncio.Future[str]:
        """``text``, user input still being transcribed or known, waits for a response."""
        self._waiting.append(text)
        return text

    def take_ready(self) -> list[str]:
        """The user input waiting for an answer whose words are known already, taken off the queue."""
        ready = self._ready()
        self._waiting = [item for item in self._waiting if item not in ready]
        return [item.result() for item in ready]

    def take_waiting(self) -> list[asyncio.Future[str]]:
        """All the user input waiting for an answer: a response answers it."""
        waiting, self._waiting = self._waiting, []
        return waiting

    def close(self) -> None:
        for item in self._waiting:
            item.cancel()

    def playing(self, number: int, reply: Reply) -> None:
        """Answer ``number`` is the one the user hears: the client may truncate it from now on."""
        self._spoken[number] = _Spoken(reply)
        while len(self._spoken) > REMEMBERED_ANSWERS:
            self._spoken.popitem(last=False)

    def remembered(self, reply: Reply, message: Message) -> None:
        """``reply`` went into the history as ``message``: apply a truncation that came before it did."""
        spoken = next((s for s in reversed(self._spoken.values()) if s.reply is reply), None)
        if spoken is not None:
            spoken.message = message
            if spoken.cut_s is not None and spoken.cut_s < reply.heard_s():
                self._conversation.truncate(message, reply.text_until(spoken.cut_s))

    def _on_delete(self, event: ItemDelete) -> None:
        """An answer heard and remembered, a message the client added, or text still waiting for a response."""
        text = self._texts.pop(event.item_id, None)
        if text is not None and text in self._waiting:
            self._waiting.remove(text)
            self._emit(ItemDeleted(event.item_id))
            return
        spoken = self._spoken.get(event.response) if event.response is not None else None
        message = spoken.message if spoken is not None else self._messages.get(event.item_id)
        if message is None or not self._conversation.forget(message):
            refusal = (
                "only a finished answer, a message the client added, or text still waiting for a response can be "
                "deleted; user speech and text already answered are part of a turn, calls part of their answer"
            )
            self._emit(Error("item_not_deletable", refusal, event.event_id))
            return
        self._messages.pop(event.item_id, None)
        self.calls.forget({call["id"] for call in message.get("tool_calls") or ()})
        self._emit(ItemDeleted(event.item_id))

    def _on_function_output(self, event: FunctionCallOutput) -> None:
        if self.calls.answer(event.call_id, event.output):
            self._emit(FunctionOutputAdded(event.call_id, event.output, event.item_id))
            return
        message = (
            f"no function call {printable(event.call_id)} waits for an output: it has one, "
            "or the conversation went on without it"
        )
        self._emit(Error("function_call_not_pending", message, event.event_id))

    def _on_truncate(self, event: TruncateRequest) -> None:
        spoken = self._spoken.get(event.response)
        if spoken is None:
            self._emit(Error("item_not_found", "that answer is no longer known to the server", event.event_id))
            return
        seconds = event.audio_end_ms / 1000.0
        if seconds > spoken.reply.sent_s + 0.001:
            message = f"audio_end_ms {event.audio_end_ms} is past the {spoken.reply.sent_s * 1000:.0f} ms of audio sent"
            self._emit(Error("invalid_value", message, event.event_id))
            return
        text = spoken.reply.text_until(seconds)
        if spoken.message is not None:
            self._conversation.truncate(spoken.message, text)
        else:
            spoken.cut_s = seconds
        self._emit(Truncated(event.response, event.audio_end_ms, text))


def _keep_recent(items: OrderedDict, item_id: str, value: object) -> None:
    """``items[item_id] = value``, keeping the last ``REMEMBERED_ANSWERS``: an id older than that is not deletable."""
    if item_id:
        items[item_id] = value
        while len(items) > REMEMBERED_ANSWERS:
            items.popitem(last=False)
