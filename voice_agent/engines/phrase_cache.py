"""Short chunks the agent says again and again, synthesized once per process and replayed.

An answer's first chunk is the one the user waits for, and an agent opens
many answers with the same few words ("I'm sorry,", "Sure.", "Of course."):
Piper's 60 to 70 ms for them is on the voice-to-voice path each time. A
filler exists to fill a silence quickly, and synthesizing "One moment" again
for every slow tool call would add Piper's time to the very wait it covers.

:class:`PhraseCache` stands in front of a TTS. A chunk of at most
``max_words`` words is kept once synthesized, the ``size`` most recently
said of them; pinned chunks (an agent's fillers) are synthesized by
:meth:`PhraseCache.pin` and never dropped. Anything else is synthesized as
usual. Piper draws its voice's variation afresh for each synthesis, so a
replayed chunk sounds like any other synthesis of the same words.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterable

import numpy as np

from .chunker import SentenceChunker, word_tokens
from .interfaces import TTSBackend
from .wait_line import WaitLine

# "I'm sorry," "No problem." "Yes, of course.": openers are short, and a longer
# chunk is rarely said twice word for word.
MAX_WORDS = 4


def spoken_chunks(phrases: Iterable[str], first_chunk_min_words: int, phrase_breaks: bool) -> set[str]:
    """Every chunk a phrase can be spoken as: cut as an answer's first chunk, or as a later one."""
    chunks: set[str] = set()
    for phrase in phrases:
        first = SentenceChunker(first_chunk_min_words, phrase_breaks)
        chunks.update([*first.push(phrase + " "), *first.flush()])
        later = SentenceChunker(first_chunk_min_words, phrase_breaks)
        later.push("Sure. Right. ")  # two chunks already spoken: the rest are whole sentences
        chunks.update([*later.push(phrase + " "), *later.flush()])
    return chunks


class PhraseCache:
    """A TTS with its short chunks cached; one per process, shared by every session."""

    def __init__(self, tts: TTSBackend, *, size: int = 0, max_words: int = MAX_WORDS):
        self._tts = tts
        self.sample_rate = tts.sample_rate
        self.voice_path: str = getattr(tts, "voice_path", "")
        self.wait_line: WaitLine | None = getattr(tts, "wait_line", None)  # the voice's, for the metrics
        self.size = size  # 0: only pinned chunks are kept
        self.max_words = max_words
        self._pinned: dict[str, list[np.ndarray]] = {}
        self._recent: OrderedDict[str, list[np.ndarray]] = OrderedDict()

    async def pin(self, chunks: Iterable[str]) -> None:
        """Synthesize ``chunks`` now and keep them for as long as the process runs."""
        for chunk in sorted(set(chunks) - self._pinned.keys()):
            pieces = self._recent.pop(chunk, None) or [piece async for piece in self._tts.synthesize(chunk)]
            self._pinned[chunk] = _frozen(pieces)

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        cached = self._cached(text)
        if cached is not None:
            for piece in cached:
                yield piece
            return
        pieces = []
        async for piece in self._tts.synthesize(text):
            pieces.append(piece)
            yield piece
        # Only a synthesis that ran to the end: a chunk cut short by a barge-in is not the chunk.
        if self.size and len(word_tokens(text)) <= self.max_words:
            self._recent[text] = _frozen(pieces)
            while len(self._recent) > self.size:
                self._recent.popitem(last=False)

    def _cached(self, text: str) -> list[np.ndarray] | None:
        if text in self._pinned:
            return self._pinned[text]
        if text in self._recent:
            self._recent.move_to_end(text)
            return self._recent[text]
        return None

    async def warm_up(self) -> None:
        await self._tts.warm_up()

    async def close(self) -> None:
        await self._tts.close()


def _frozen(pieces: list[np.ndarray]) -> list[np.ndarray]:
    """Every session is handed the same arrays: one that wrote into its copy would change them for all."""
    for piece in pieces:
        piece.flags.writeable = False
    return pieces
