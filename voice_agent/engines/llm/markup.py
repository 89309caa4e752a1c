"""Chat-template markup: the special tokens a text must not smuggle into a prompt.

Chat templates mark turns with special tokens (ChatML's ``<|im_start|>``,
Llama 3's ``<|start_header_id|>``), and llama.cpp and vLLM tokenize the
rendered prompt with special tokens parsed: a user who types one, or a tool
result or hook that carries one, could open a system turn of its own. Which
texts are special is the model's own vocabulary: SmolLM2 also has
``<filename>``, ``<jupyter_code>`` and a dozen more that do not look like
``<|...|>``. A backend that knows its vocabulary names them in its
``special_tokens`` attribute; :data:`CHAT_MARKUP` covers the ``<|...|>`` form
for any model.

Typed user text holding markup is refused with an error
(``protocols/client_options.py`` for the ``<|...|>`` form, the session for
the loaded model's tokens); every other text (tool results, the start hook's
instructions and greeting, the history) is screened: the backend removes
markup from every message before it renders the prompt.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from ...printable import CHAT_MARKUP
from .base import Message

SHORTEST_TOKEN = 3  # a vocabulary that marks a single character as special cannot mean that as markup


class ChatMarkup:
    """The markup of one model: its special tokens, and the ``<|...|>`` form."""

    def __init__(self, special_tokens: Iterable[str] = ()):
        # Longest first, so a token that contains another is matched whole. Plain words are never markup,
        # whatever a vocabulary's attributes say: removing them would change what people say.
        self.tokens = sorted(
            {t for t in special_tokens if len(t) >= SHORTEST_TOKEN and not t.replace(" ", "").isalnum()},
            key=len,
            reverse=True,
        )
        self._pattern = re.compile("|".join([CHAT_MARKUP.pattern, *map(re.escape, self.tokens)]))

    def find(self, text: str) -> str | None:
        """The first markup in ``text``, if any."""
        match = self._pattern.search(text)
        return match.group() if match else None

    def screen(self, text: str) -> str:
        """``text`` without markup; removed until none is left, as a removal can join two halves into a token."""
        while True:
            screened = self._pattern.sub("", text)
            if screened == text:
                return text
            text = screened

    def screen_messages(self, messages: list[Message]) -> list[Message]:
        """``messages`` with markup removed from their texts; the same list when none holds any."""
        if not any(isinstance(m.get("content"), str) and self._pattern.search(m["content"]) for m in messages):
            return messages
        return [
            {**m, "content": self.screen(m["content"])} if isinstance(m.get("content"), str) else m for m in messages
        ]


@functools.lru_cache(maxsize=4)
def _markup(tokens: frozenset[str]) -> ChatMarkup:
    return ChatMarkup(tokens)


def chat_markup(llm: object) -> ChatMarkup:
    """The markup of ``llm``'s model: its ``special_tokens`` if it names them, and the ``<|...|>`` form."""
    return _markup(frozenset(getattr(llm, "special_tokens", ())))
