"""Who holds the agent's voice back: the reply the user hears flows only while no holder remains.

Each part that silences the agent pauses under its own name and resumes only
that name, so one part's resume never lets out what another still holds.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable


class Hold(enum.Enum):
    PREPARED = "prepared"  # answered while the turn may go on: not the one playing yet
    GRACE_ONSET = "grace onset"  # a speech window within the grace, before it made a turn (turn_merge)
    ONSET = "onset"  # a speech window over the agent, too short yet for a turn (interruptions)
    TURN = "turn"  # a user turn over the agent, while its words are looked at and checked


# Every hold the user's speech puts on the agent: what a verdict on that speech lets go.
USER_HOLDS = (Hold.GRACE_ONSET, Hold.ONSET, Hold.TURN)


class Holds:
    """The set of holders of one reply's audio, and the gate its frames wait at."""

    def __init__(self, held: Iterable[Hold] = ()):
        self._holders = set(held)
        self._flowing = asyncio.Event()
        if not self._holders:
            self._flowing.set()

    def add(self, holder: Hold) -> bool:
        """Hold back under ``holder``; whether the audio flowed until now."""
        flowed = not self._holders
        self._holders.add(holder)
        self._flowing.clear()
        return flowed

    def release(self, holders: Hold | Iterable[Hold]) -> bool:
        """Let ``holders`` go; whether that let the audio flow again."""
        held = bool(self._holders)
        self._holders -= {holders} if isinstance(holders, Hold) else set(holders)
        if self._holders:
            return False
        self._flowing.set()
        return held

    def hand_over(self, holder: Hold, to: Hold) -> None:
        """``to`` takes over what ``holder`` holds, with no frame let out between."""
        if holder in self._holders:
            self._holders.add(to)
            self._holders.discard(holder)

    def __contains__(self, holder: Hold) -> bool:
        return holder in self._holders

    def __bool__(self) -> bool:
        return bool(self._holders)

    async def wait(self) -> None:
        await self._flowing.wait()
