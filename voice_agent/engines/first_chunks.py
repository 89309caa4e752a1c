"""First chunks before later chunks, across the sessions of a process.

A reply's first chunk is what its user waits for; the rest of the answer only
has to be ready before the audio already made has played. On a few cores the
later chunks of one session's answer (tokens, then Piper) share the CPU with
the first chunks of others and slow them. So a reply whose first chunk is out
stops pulling tokens while another reply still waits for its first one, as
long as it has audio in hand: while it is held (prepared before the turn is
known to be over, or paused), or while more than ``ahead_s`` of its audio is
still to be played. The LLM computes only a few tokens ahead of its reader
(``iterate_in_thread``), so the cores go to the others meanwhile. Not while
work waits for an LLM instance: the reply holds one, and finishing frees it.

:class:`FirstChunks` only counts and wakes; :class:`~voice_agent.reply.pipeline.Reply` decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

# Margin over what a chunk takes to generate and synthesize under load (about 0.3 to 0.6 s on 2 cores
# with 4 sessions): a playing reply with less than this still to play goes on.
GIVE_WAY_AHEAD_S = 1.0
RECHECK_S = 0.05  # how often a waiting reply looks again at its own audio in hand


class FirstChunks:
    """The replies waiting for their first chunk."""

    def __init__(self, llm_waiting: Callable[[], int] = lambda: 0) -> None:
        self._llm_waiting = llm_waiting  # how much work waits for an LLM instance now
        self._waiting: set[Hashable] = set()
        self._changed: asyncio.Event | None = None  # set when one gets its first chunk; made on the serving loop

    def waiting(self, reply: Hashable) -> None:
        """``reply`` has asked the LLM and has no chunk yet."""
        self._waiting.add(reply)

    def done(self, reply: Hashable) -> None:
        """``reply`` has its first chunk, or has ended without one."""
        if reply in self._waiting:
            self._waiting.discard(reply)
            if self._changed is not None:
                self._changed.set()

    def others_waiting(self, reply: Hashable) -> int:
        return len(self._waiting - {reply})

    async def give_way(self, reply: Hashable, may_wait: Callable[[], bool]) -> None:
        """Return once no other reply waits for its first chunk, work waits for an LLM instance, or
        ``may_wait()`` turns false."""
        while self.others_waiting(reply) and not self._llm_waiting() and may_wait():
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), RECHECK_S)
            except TimeoutError:
                pass
