"""Decoding a Realtime client event: the size caps, and a fast path for audio.

Audio appends are the one large event: up to 1 MiB (the WebSocket's own
limit), 16 s of 24 kHz PCM16 in base64. Every other event is held to the
64 KiB of every codec (:data:`strict_json.MAX_MESSAGE_CHARS`), so a client
cannot make the server parse a megabyte of anything but audio.

An append in its usual form, ``{"type": ..., "event_id": ..., "audio": ...}``
with plain strings, is read with one regular expression per member, without
building or walking a JSON tree. Anything else goes through
:func:`strict_json.decode_object` with its value budget, and is refused as
``message_too_large`` if it is long and turns out not to be an append.
"""

from __future__ import annotations

import re
from typing import Any

from .strict_json import MAX_MESSAGE_CHARS, InvalidJSON, decode_object

APPEND = "input_audio_buffer.append"
# Any message the server's WebSocket takes (1 MiB, cli.MAX_MESSAGE_BYTES): more audio than the audio rate
# limit lets through at once.
MAX_APPEND_CHARS = 1 << 20

_WHITESPACE = "[ \t\n\r]*"  # JSON's four, not every character Python calls a space
_OPENING = re.compile(_WHITESPACE + r"\{")
# A member of a plain append, up to its value's opening quote, and what follows the value's closing one.
_KEY = re.compile(_WHITESPACE + r'"(type|event_id|audio)"' + _WHITESPACE + ":" + _WHITESPACE + '"')
_NEXT = re.compile(_WHITESPACE + "([,}])")
# What the strict decoder refuses in a string besides escapes: control characters and lone surrogates.
_UNSAFE = re.compile(r"[\x00-\x1f\ud800-\udfff]")


def decode_event(text: str) -> dict[str, Any]:
    """The client event in ``text``, or :class:`InvalidJSON`."""
    if len(text) > MAX_APPEND_CHARS:
        raise InvalidJSON(
            "message_too_large", f"text message of {len(text)} characters; the limit is {MAX_APPEND_CHARS}"
        )
    if (append := _plain_append(text)) is not None:
        return append
    message = decode_object(text, MAX_APPEND_CHARS)
    if len(text) > MAX_MESSAGE_CHARS and message.get("type") != APPEND:
        raise InvalidJSON(
            "message_too_large",
            f"text message of {len(text)} characters; the limit is {MAX_MESSAGE_CHARS} for every event but {APPEND}",
        )
    return message


def _plain_append(text: str) -> dict[str, Any] | None:
    """The fields of an append written plainly (no escapes, no other keys); else None.

    The audio is not scanned here: C-speed searches find its ends, and the handler's base64 decoding
    refuses any character base64 does not use, control characters included.
    """
    opening = _OPENING.match(text)
    if opening is None:
        return None
    fields: dict[str, Any] = {}
    at = opening.end()
    while True:
        key = _KEY.match(text, at)
        if key is None or key[1] in fields:
            return None  # another form, or a duplicate key: the strict decoder says what is wrong
        end = text.find('"', key.end())
        if end < 0 or text.find("\\", key.end(), end) >= 0:
            return None
        value = text[key.end() : end]
        if not value.isascii() if key[1] == "audio" else _UNSAFE.search(value):
            return None
        fields[key[1]] = value
        follows = _NEXT.match(text, end + 1)
        if follows is None:
            return None
        at = follows.end()
        if follows[1] == "}":
            break
    if text[at:].strip(" \t\n\r") or fields.get("type") != APPEND or "audio" not in fields:
        return None
    return fields
