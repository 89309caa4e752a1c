"""Which session options a client may set, and how long they may be.

A client that chooses the system prompt or the greeting chooses what the
agent says, in the operator's voice and on the operator's bill, so both are
off unless the operator allows them (``--allow-client-prompt``), and bounded
even then. Shared by every codec that carries such options (the native
``start``, telephony ``customParameters``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..printable import CHAT_MARKUP  # the <|...|> form; the session refuses the loaded model's own tokens
from .events import ProtocolError

MAX_SYSTEM_PROMPT_CHARS = 4000
MAX_GREETING_CHARS = 500

PROMPT_OPTIONS = {"system_prompt": MAX_SYSTEM_PROMPT_CHARS, "greeting": MAX_GREETING_CHARS}
# Custom parameters of a call, and the other fields of a native start: an agent's start hook reads them.
MAX_PARAMETERS = 32
MAX_PARAMETER_CHARS = 1000  # the greeting's and the prompt's own limits apply on top

# Control characters other than tab and newlines mean nothing to a listener, and the phonemizer, the LLM
# and a log reader each take them their own way.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def screen_prompt_options(offered: Mapping[str, Any], allowed: bool) -> tuple[dict[str, str], list[ProtocolError]]:
    """The prompt options in ``offered`` the session may use, and an error for each one refused."""
    options: dict[str, str] = {}
    errors: list[ProtocolError] = []
    for name, limit in PROMPT_OPTIONS.items():
        if name not in offered:
            continue
        value = offered[name]
        if not isinstance(value, str):
            errors.append(ProtocolError("invalid_message", f"{name} must be a string; ignored"))
        elif not allowed:
            errors.append(ProtocolError("option_not_allowed", f"this server does not let clients set {name}; ignored"))
        elif len(value) > limit:
            errors.append(ProtocolError("option_too_long", f"{name} is over {limit} characters; ignored"))
        else:
            options[name] = value
    return options, errors


def is_parameter_map(value: Any) -> bool:
    """At most ``MAX_PARAMETERS`` names with string values, none over ``MAX_PARAMETER_CHARS``."""
    return (
        isinstance(value, dict)
        and len(value) <= MAX_PARAMETERS
        and all(
            len(name) <= MAX_PARAMETER_CHARS and isinstance(v, str) and len(v) <= MAX_PARAMETER_CHARS
            for name, v in value.items()
        )
    )


def user_text_error(text: str) -> ProtocolError | None:
    """An error if ``text``, bound for the LLM as the user's words, holds chat-template markup or control characters."""
    if CHAT_MARKUP.search(text):
        return ProtocolError("invalid_text", "text holds chat-template markup such as <|im_start|>; ignored")
    if _CONTROL.search(text):
        return ProtocolError("invalid_text", "text holds control characters; ignored")
    return None
