"""Client-supplied values made safe to echo in an error message or a log line.

A value a client sent can be long, can carry newlines that forge log lines,
and can carry terminal escape sequences. Everything echoed goes through
:func:`printable`: bounded, quoted like ``repr``, control characters escaped.
"""

from __future__ import annotations

import re
import reprlib

ECHO_CHARS = 60

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, and lone surrogates
# (which cannot even be written out as UTF-8).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Chat-template markup in the ``<|...|>`` form: a client's text must not reach the LLM as control tokens.
CHAT_MARKUP = re.compile(r"<\|[^<>|\s]{1,40}\|>")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as its Python escape (a newline becomes ``\\n``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def printable(value: object, limit: int = ECHO_CHARS) -> str:
    """A short, single-line ``repr`` of ``value``: at most about ``limit`` characters."""
    shorten = reprlib.Repr()
    shorten.maxstring = shorten.maxother = shorten.maxlong = limit
    shorten.maxlevel, shorten.maxdict, shorten.maxlist = 2, 4, 4
    try:
        text = shorten.repr(value)
    except Exception:  # a huge int's repr raises ValueError (Python's int-to-string digit limit)
        text = f"<{type(value).__name__}>"
    if len(text) > limit + 6:
        text = text[:limit] + "..."
    return escape_controls(text)
