"""Strict JSON decoding, shared by every codec.

Python's ``json`` accepts more than a wire protocol should: ``NaN`` and
``Infinity``, integers of any length (turning one of a few thousand digits
into a number, or failing on it, costs real time), duplicate keys (the last
one silently wins), lone UTF-16 surrogates, and nesting deep enough to exhaust
the interpreter's recursion. :func:`decode_object` refuses all of these with a
:class:`InvalidJSON` that says which, and never raises anything else, so a
codec turns every failure into an ``error`` event.

It also refuses a message of too many values before parsing it: a megabyte
of ``{},`` is 349,000 objects, each a Python callback and an allocation, a
quarter of a second of the event loop. Counting them first costs a scan of
the text at C speed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_MESSAGE_CHARS = 64 * 1024  # a start with a 4000-character prompt, every character \u-escaped, fits
MAX_DEPTH = 8  # the deepest message any codec reads has 3 levels
MAX_INT_DIGITS = 19  # fits a 64-bit sequence number
# Values (objects, arrays, strings, numbers, literals) in one message, an empty object or array counting as
# two. A Realtime session.update with a few dozen tools has a few hundred.
MAX_NODES = 4096

# A JSON string, escapes included: what the node count skips, since commas and brackets inside it are text.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class InvalidJSON(ValueError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise InvalidJSON("invalid_json", "duplicate key in a JSON object")
    return obj


def _constant(name: str) -> float:
    raise InvalidJSON("invalid_json", f"{name} is not a JSON number")


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise InvalidJSON("invalid_json", f"integer of over {MAX_INT_DIGITS} digits")
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJSON("invalid_json", "number out of range")
    return value


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_integer, parse_float=_float)


def decode_object(text: str, max_chars: int = MAX_MESSAGE_CHARS) -> dict[str, Any]:
    """The JSON object in ``text``, or :class:`InvalidJSON`."""
    if len(text) > max_chars:
        raise InvalidJSON("message_too_large", f"text message of {len(text)} characters; the limit is {max_chars}")
    if _nodes_at_most(text) > MAX_NODES:
        raise InvalidJSON("too_many_values", f"a message may hold at most {MAX_NODES} JSON values")
    try:
        value = _DECODER.decode(text)
    except InvalidJSON:
        raise
    except RecursionError:
        raise InvalidJSON("invalid_json", f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except Exception:  # JSONDecodeError, and anything a pathological input may raise
        raise InvalidJSON("invalid_json", "text message is not valid JSON") from None
    _check_tree(value)
    if not isinstance(value, dict):
        raise InvalidJSON("invalid_message", "a text message must be a JSON object")
    return value


def _nodes_at_most(text: str) -> int:
    """The values in ``text``, an empty object or array counting as two.

    Every value but the first of a container follows a comma, and the first its opening bracket, outside
    strings. The count over the whole text bounds that from above; a text over the budget by it, and no
    longer than :data:`MAX_MESSAGE_CHARS`, is counted again with its strings cut out. Longer ones are
    Realtime audio, whose strings hold no commas or brackets; a megabyte of short strings would take the
    second count 30 ms.
    """
    nodes = 1 + text.count(",") + text.count("[") + text.count("{")
    if nodes <= MAX_NODES or len(text) > MAX_MESSAGE_CHARS:
        return nodes
    bare = _STRING.sub("", text)
    return 1 + bare.count(",") + bare.count("[") + bare.count("{")


def _check_tree(value: Any) -> None:
    """Depth and strings, iteratively: the tree is already bounded by the recursion the parser allowed."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_string(item)
        elif isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise InvalidJSON("invalid_json", f"JSON nested deeper than {MAX_DEPTH} levels")
            children = item.items() if isinstance(item, dict) else ((None, v) for v in item)
            for key, child in children:
                if key is not None:
                    _check_string(key)
                stack.append((child, depth + 1))


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJSON("invalid_json", "a string holds an unpaired UTF-16 surrogate") from None
