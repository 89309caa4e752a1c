"""The agent's fillers, synthesized once per process and replayed.

A filler exists to fill a silence quickly: synthesizing "One moment" again
for every slow tool call would add Piper's time (45 ms alone, over a second
on a crowded CPU) to the very wait it covers. :class:`FillerVoice` stands in
front of the engine's TTS: a chunk that is one of the fillers' chunks (as the
chunker cuts them, first in an answer or later) is played from the cache;
anything else is synthesized as usual.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

import numpy as np

from .chunker import SentenceChunker
from .interfaces import TTSBackend


def filler_chunks(fillers: Iterable[str], first_chunk_min_words: int, phrase_breaks: bool) -> set[str]:
    """Every chunk a filler can be spoken as: cut as an answer's first chunk, or as a later one."""
    chunks: set[str] = set()
    for filler in fillers:
        first = SentenceChunker(first_chunk_min_words, phrase_breaks)
        chunks.update([*first.push(filler + " "), *first.flush()])
        later = SentenceChunker(first_chunk_min_words, phrase_breaks)
        later.push("Sure. Right. ")  # two chunks already spoken: the rest are whole sentences
        chunks.update([*later.push(filler + " "), *later.flush()])
    return chunks


class FillerVoice:
    """The engine's TTS, with the fillers' chunks cached (shared by every session of the process)."""

    def __init__(self, tts: TTSBackend, chunks: set[str]):
        self._tts = tts
        self.sample_rate = tts.sample_rate
        self._chunks = chunks
        self._cache: dict[str, list[np.ndarray]] = {}

    async def warm_up(self) -> None:
        for chunk in sorted(self._chunks):
            async for _ in self.synthesize(chunk):
                pass

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        cached = self._cache.get(text)
        if cached is not None:
            for piece in cached:
                yield piece
            return
        pieces = []
        async for piece in self._tts.synthesize(text):
            pieces.append(piece)
            yield piece
        if text in self._chunks:
            self._cache[text] = pieces

    async def close(self) -> None:
        """Nothing: the engine it speaks with belongs to the process's engines."""
