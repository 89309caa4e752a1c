"""First chunks before later chunks, across the sessions of a process.

A reply's first chunk is what its user waits for; the rest of the answer only
has to be ready before the audio already made has played. On a few cores the
later chunks of one session's answer (tokens, then Piper) share the CPU with
the first chunks of others and slow them. So a reply whose first chunk is out
stops pulling tokens while another reply still waits for its first one, as
long as it has audio in hand: while it is held (prepared before the turn is
known to be over, or paused), or while more than ``GIVE_WAY_AHEAD_S`` of its
audio is still to be played. The LLM computes only a few tokens ahead of its
reader (``iterate_in_thread``), so the cores go to the others meanwhile. Not
while work waits for an LLM instance: the reply holds one, and finishing frees
it.

With ``first_audio_first`` (an option) the rule covers a turn's whole critical
path, from its final transcript to its first chunk's audio: a final transcript
waiting or running elsewhere counts (``finals_in_flight``), a reply waits until
its first chunk is synthesized, not only written, and a playing reply's later
chunks wait before synthesis too (their synthesis frees no LLM instance, so
they wait whoever waits for one). Its deadline grows with the machine's load:
it goes on once its audio in hand is down to ``GIVE_WAY_AHEAD_S`` plus the
longest one of its chunks took to synthesize (:func:`has_audio_in_hand`; a
7-word sentence took Piper 2.4 s on 2 cores at load average 11).

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
    """The replies waiting for their first chunk, and the other work on a turn's critical path."""

    def __init__(
        self,
        llm_waiting: Callable[[], int] = lambda: 0,
        finals_in_flight: Callable[[], int] = lambda: 0,
        *,
        first_audio_first: bool = False,
    ) -> None:
        self._llm_waiting = llm_waiting  # how much work waits for an LLM instance now
        self._finals_in_flight = finals_in_flight  # final transcripts waiting for Whisper or running now
        self.first_audio_first = first_audio_first  # the rule covers the whole critical path (the replies read it)
        self._waiting: set[Hashable] = set()
        self._changed: asyncio.Event | None = None  # set when one gets its first chunk; made on the serving loop

    def waiting(self, reply: Hashable) -> None:
        """``reply`` has asked the LLM and has no first chunk (or, with first_audio_first, its audio) yet."""
        self._waiting.add(reply)

    def done(self, reply: Hashable) -> None:
        """``reply`` has its first chunk (its audio, with first_audio_first), or has ended without one."""
        if reply in self._waiting:
            self._waiting.discard(reply)
            if self._changed is not None:
                self._changed.set()

    def others_waiting(self, reply: Hashable) -> int:
        """Work on a critical path other than ``reply``'s: replies without their first chunk, and finals."""
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
