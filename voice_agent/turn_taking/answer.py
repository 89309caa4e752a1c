"""A handle on one answer: its task, who holds its voice back, and how it ended (LiveKit's ``SpeechHandle``).

Each holder resumes only its own pause, so one part's resume never lets out
what another still holds. Only the floor (:mod:`.floor`) pauses, resumes or
cancels it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ..protocols.events import CANCELLED, COMPLETED, FAILED
from ..reply.pipeline import Reply

log = logging.getLogger(__name__)


class Hold(enum.Enum):
    GRACE_ONSET = "grace onset"  # a speech window within the grace, before it made a turn
    ONSET = "onset"  # a speech window over the agent, too short yet for a turn
    TURN = "turn"  # a user turn over the agent, while its words are checked


USER_HOLDS = (Hold.GRACE_ONSET, Hold.ONSET, Hold.TURN)  # what a verdict on the user's speech lets go


class Answer:
    """The answer under way: to the spoken turn whose audio starts at ``turn_start``; None for text, fixed words."""

    def __init__(self, turn_start: int | None = None, turn_id: int | None = None, reply: Reply | None = None):
        self.turn_start, self.turn_id = turn_start, turn_id
        self.number: int | None = None  # its response number, once it plays
        self.task: asyncio.Task | None = None
        self.reply: Reply | None = None  # once it is the reply the user hears
        self._holders: set[Hold] = set()
        self.ended: tuple[str, str | None] | None = None  # (status, reason): its own, never a session's field
        self._done: asyncio.Future[tuple[str, str | None]] | None = None
        if reply is not None:
            self.attach(reply)

    def start(self, run: Callable[[Answer], Coroutine[Any, Any, None]]) -> None:
        self.task = asyncio.create_task(run(self))

    def attach(self, reply: Reply, number: int | None = None) -> None:
        """``reply``, response ``number``, is the one the user hears: it flows unless held."""
        self.reply, self.number = reply, number
        reply.set_flowing(not self._holders)

    def pause(self, holder: Hold, why: str) -> bool:
        """Hold the voice back under ``holder``; whether it flowed until now."""
        flowed = not self._holders
        self._holders.add(holder)
        if self.reply is not None:
            self.reply.set_flowing(False)
        if flowed:
            log.debug("answer to turn %s paused: %s", self.turn_id, why)
        return flowed

    def resume(self, holders: Hold | Iterable[Hold], why: str) -> bool:
        """Let ``holders`` go; whether that let the voice flow again."""
        held = bool(self._holders)
        self._holders -= {holders} if isinstance(holders, Hold) else set(holders)
        if self._holders or not held:
            return False
        if self.reply is not None:
            self.reply.set_flowing(True)
        log.debug("answer to turn %s resumed: %s", self.turn_id, why)
        return True

    def hand_over(self, holder: Hold, to: Hold) -> None:
        if holder in self._holders:
            self._holders.add(to)
            self._holders.discard(holder)

    def held_by(self, holder: Hold) -> bool:
        return holder in self._holders

    @property
    def paused(self) -> bool:
        return bool(self._holders)

    def finish(self, failed: bool) -> None:
        self._end(FAILED if failed else COMPLETED, None)

    def cancel(self, reason: str) -> None:
        self._end(CANCELLED, reason)
        if self.task is not None:
            self.task.cancel()

    def _end(self, status: str, reason: str | None) -> None:
        if self.ended is None:
            self.ended = (status, reason)
            if self._done is not None and not self._done.done():
                self._done.set_result(self.ended)

    async def done(self) -> tuple[str, str | None]:
        """Wait for its end: (status, reason)."""
        if self.ended is not None:
            return self.ended
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
        return await self._done

    @property
    def heard_nothing(self) -> bool:
        return self.reply is None or not self.reply.started_audio

    @property
    def voiced_at(self) -> float | None:
        return None if self.reply is None else self.reply.timings.first_audio_at

    def in_grace(self, now: float, grace_ms: float) -> bool:
        """Whether the user going on now means they were not done: within the grace of its first audio."""
        voiced_at = self.voiced_at
        return self.turn_start is not None and voiced_at is not None and (now - voiced_at) * 1000 <= grace_ms
