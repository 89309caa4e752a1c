"""The LLM backend interface.

A backend streams the answer to a chat as text deltas. Aborting is closing
the stream (``aclose()``, or cancelling the task that iterates it): every
backend must then stop generating, so a barge-in frees the engine at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


class LLMBackend(Protocol):
    name: str

    def stream_chat(self, messages: list[Message]) -> AsyncGenerator[str, None]:
        """Stream the assistant's reply to ``messages`` as text deltas."""
        ...

    async def prefill(self, messages: list[Message]) -> None:
        """Make a later request that starts with ``messages`` quicker, if the backend can.

        A hint, called with the system prompt and history between turns:
        a backend without a cache to fill in advance returns at once.
        """
        ...

    async def end_of_turn_logprob(self, messages: list[Message], *, answering: bool = False) -> float | None:
        """Log probability that the last (user) message of ``messages`` is finished as it stands.

        An optional signal for the turn decision: a backend that cannot read
        the end-of-turn token's probability returns None, and the decision
        falls back to the transcript rules. ``answering``: an answer to
        exactly ``messages`` is being started: a backend that can read the
        probability while evaluating that answer's prompt does so, rather
        than evaluate the prompt twice.
        """
        ...

    async def warm_up(self) -> None:
        """Pay one-time costs (first evaluation, caches) before the first user."""
        ...

    async def close(self) -> None: ...
