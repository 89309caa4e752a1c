"""The agent's side of the floor: what it is doing, and the answer under way."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from .reply.pipeline import Reply


class TurnState(enum.Enum):
    """What the agent is doing; whether the user is speaking is the listener's current ``UserTurn``."""

    LISTENING = "listening"  # no answer under way
    RESPONDING = "responding"  # a turn is committed: its transcript and answer are being prepared
    SPEAKING = "speaking"  # a reply is the one the user hears (it may be paused, or not have begun yet)


@dataclass
class Answer:
    """The answer under way: to the spoken turn whose audio starts at ``turn_start``; None for text, fixed words."""

    turn_start: int | None
    turn_id: int | None = None  # the spoken turn it answers
    number: int | None = None  # its response number, once it plays (ResponseStarted)
    task: asyncio.Task | None = None
    reply: Reply | None = None  # set once it is the reply the user hears

    @property
    def heard_nothing(self) -> bool:
        return self.reply is None or not self.reply.started_audio

    @property
    def voiced_at(self) -> float | None:
        """When its first audio went out."""
        return None if self.reply is None else self.reply.timings.first_audio_at

    def in_grace(self, now: float, grace_ms: float) -> bool:
        """Whether the user going on now means they were not done (the graceful way out)."""
        voiced_at = self.voiced_at
        return self.turn_start is not None and voiced_at is not None and (now - voiced_at) * 1000 <= grace_ms


def state_of(answer: Answer | None) -> TurnState:
    if answer is None:
        return TurnState.LISTENING
    return TurnState.RESPONDING if answer.reply is None else TurnState.SPEAKING
