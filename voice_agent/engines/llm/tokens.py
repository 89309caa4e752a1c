"""How many tokens a text makes: the backend's own tokenizer when it has one, else an over-estimate.

The prompt window (``conversation.py``) is bounded by the LLM's context, so it
needs token counts, not characters: a character outside the tokenizer's
merges costs a token per UTF-8 byte (a CJK extension character is four tokens
in SmolLM2's vocabulary), and a window sized at four characters a token
overflows by four times. A backend that can tokenize (llama.cpp) has a
``count_tokens(text)`` method; for one that cannot (an OpenAI-compatible
server's tokenizer is on the server) :func:`estimate_tokens` counts high.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

# Token counts a session keeps: a prompt's messages are counted again for every answer and partial transcript.
COUNTS_KEPT = 256
LETTERS_PER_TOKEN = 3  # English runs about four to a token in a byte-level BPE vocabulary


def estimate_tokens(text: str) -> int:
    """At least as many tokens as ``text`` makes in a byte-level BPE or byte-fallback vocabulary, nearly always.

    ASCII letters and spaces at three a token; every other ASCII character
    (digits, punctuation, newlines: often a token each) one token; every other
    character one token per UTF-8 byte, which no byte-level vocabulary exceeds.
    """
    letters = sum(1 for c in text if c == " " or ("a" <= c <= "z") or ("A" <= c <= "Z"))
    ascii_others = sum(1 for c in text if c.isascii()) - letters
    other_bytes = len(text.encode("utf-8", "replace")) - letters - ascii_others
    return -(-letters // LETTERS_PER_TOKEN) + ascii_others + other_bytes


def token_counter(llm: object) -> Callable[[str], int]:
    """A counter of ``llm``'s tokens in a text (its ``count_tokens``, else :func:`estimate_tokens`), with a cache."""
    count = getattr(llm, "count_tokens", None)
    return functools.lru_cache(maxsize=COUNTS_KEPT)(count if callable(count) else estimate_tokens)
