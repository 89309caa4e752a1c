"""First audio before later audio, across the sessions of a process.

A turn's critical path runs from its final transcript to its answer's first
audio: that is what its user waits for. The rest of an answer that already
plays only has to be ready before the audio made so far has played. On a few
cores the two share the CPU: the later tokens and later Piper chunks of one
session's answer slow the finals, first tokens and first chunks of others, and
under processor sharing every session in step finishes late together. So a
reply whose first chunk is synthesized stops pulling tokens, and stops
synthesizing its next chunk, while another session is on its critical path (a
final transcript waits or runs, or a reply waits for its first chunk's audio),
as long as it has audio in hand: while it is held (prepared before the turn
is known to be over, or paused), or while more of its audio is still to be
played than ``GIVE_WAY_AHEAD_S`` and the longest its chunks took to synthesize
(:func:`has_audio_in_hand`). That is its deadline: with less in hand it goes
on whoever waits, so a playing answer does not run dry for it, however loaded
the machine (a 7-word sentence took Piper 2.4 s on 2 cores at load average
11). The LLM computes only a few tokens ahead of its reader
(``iterate_in_thread``), so the cores go to the others meanwhile. Its tokens,
not its chunks, go on while work waits for an LLM instance: the reply holds
one, and finishing frees it.

:class:`FirstChunks` only counts and wakes; :class:`~voice_agent.reply.pipeline.Reply` decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

# Margin over what the next chunk takes to synthesize: its tokens' time (about 0.3 to 0.6 s on 2 cores
# with 4 sessions), and the jitter of the synthesis itself.
GIVE_WAY_AHEAD_S = 1.0
RECHECK_S = 0.05  # how often a waiting reply looks again at its own audio in hand and at the others


def has_audio_in_hand(to_play_s: float, chunk_took_s: float) -> bool:
    """Whether a playing reply with ``to_play_s`` of audio still to play may wait, when its chunks took up
    to ``chunk_took_s`` each to synthesize: its next chunk, made after the wait, comes before that runs out."""
    return to_play_s > GIVE_WAY_AHEAD_S + chunk_took_s


class FirstChunks:
    """The replies waiting for their first chunk's audio, and the other work on a turn's critical path."""

    def __init__(
        self, llm_waiting: Callable[[], int] = lambda: 0, finals_in_flight: Callable[[], int] = lambda: 0
    ) -> None:
        self._llm_waiting = llm_waiting  # how much work waits for an LLM instance now
        self._finals_in_flight = finals_in_flight  # final transcripts waiting for Whisper or running now
        self._waiting: set[Hashable] = set()
        self._changed: asyncio.Event | None = None  # set when one gets its first chunk; made on the serving loop

    def waiting(self, reply: Hashable) -> None:
        """``reply`` has asked the LLM and has no first chunk's audio yet."""
        self._waiting.add(reply)

    def done(self, reply: Hashable) -> None:
        """``reply`` has its first chunk synthesized, or has ended without one."""
        if reply in self._waiting:
            self._waiting.discard(reply)
            if self._changed is not None:
                self._changed.set()

    def others_waiting(self, reply: Hashable) -> int:
        """Work on a critical path other than ``reply``'s: replies without their first audio, and finals."""
        return len(self._waiting - {reply}) + self._finals_in_flight()

    async def give_way(self, reply: Hashable, may_wait: Callable[[], bool], *, frees_instance: bool = True) -> None:
        """Return once nothing else is on a critical path, or ``may_wait()`` turns false; and, when what waits
        here ``frees_instance`` (the reply's next token: finishing gives its LLM instance back), once work
        waits for an LLM instance."""
        while self.others_waiting(reply) and not (frees_instance and self._llm_waiting()) and may_wait():
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), RECHECK_S)
            except TimeoutError:
                pass
