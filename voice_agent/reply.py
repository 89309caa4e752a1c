"""One spoken answer: LLM deltas → chunker → TTS → paced audio frames.

Three tasks run at once so that each stage starts on the previous stage's
first output, and later chunks are synthesized while earlier ones play. One
exception: the LLM waits while the first chunk is synthesized. On a CPU the
two share the cores, and the first chunk's audio is what the user is waiting
for, while the rest of the answer has that chunk's playing time to catch up
(Piper's first sentence: 118 ms alone, 185 ms beside a llama.cpp generation,
2 threads on 2 cores). The LLM backend stops computing when its stream is not
read (llama.cpp: ``iterate_in_thread``'s ``ahead``). Cancelling
:meth:`Reply.run` stops all three: the LLM stream and TTS worker are closed,
and no frame is emitted after the cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .audio import StreamResampler
from .chunker import SentenceChunker, words
from .interfaces import TTSBackend
from .llm.base import LLMBackend, Message
from .pacing import PlaybackClock
from .protocols.events import AgentAudio, Mark, OutputEvent, Transcript

FRAME_MS = 20


@dataclass
class SpokenChunk:
    text: str
    start_s: float = 0.0  # offset in the reply's audio, set when its first frame is sent
    end_s: float | None = None  # set once all its audio is sent
    synthesized_s: float = 0.0  # its audio so far: all of it, before much is sent
    mark: str = ""


@dataclass
class ReplyTimings:
    request_at: float = 0.0
    llm_ttft_ms: float | None = None
    first_chunk_ms: float | None = None
    tts_ttfa_ms: float | None = None
    first_audio_at: float | None = None


class _ChunkDone:
    def __init__(self, index: int):
        self.index = index


class Reply:
    def __init__(
        self,
        *,
        llm: LLMBackend,
        tts: TTSBackend,
        messages: list[Message],
        output_rate: int,
        lead_s: float,
        emit: Callable[[OutputEvent], None],
        turn: int,
        user_text: str,
        first_chunk_min_words: int = 2,
        phrase_breaks: bool = False,
        on_first_audio: Callable[[Reply], None] | None = None,
        held: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._llm = llm
        self._tts = tts
        self._messages = messages
        self._rate = output_rate
        self._frame = output_rate * FRAME_MS // 1000
        self._emit = emit
        self._on_first_audio = on_first_audio
        self._clock = clock
        self._chunker = SentenceChunker(first_chunk_min_words, phrase_breaks)
        self.turn = turn
        self.user_text = user_text
        self.playback = PlaybackClock(lead_s, clock)
        self.timings = ReplyTimings()
        self.chunks: list[SpokenChunk] = []
        self._sent_s = 0.0
        self._marked: tuple[float, float] | None = None  # (audio offset, when the client confirmed it)
        # Frames flow only while this is set. A held reply generates and synthesizes
        # ahead but emits nothing until resumed: that is how an answer is prepared
        # while the turn may still go on. A pause stops the voice while the session
        # finds out whether the user is interrupting or only saying "mm-hm".
        self._flowing = asyncio.Event()
        if not held:
            self._flowing.set()
        self._first_chunk_synthesized = asyncio.Event()

    @property
    def started_audio(self) -> bool:
        return self.timings.first_audio_at is not None

    @property
    def text(self) -> str:
        return " ".join(chunk.text for chunk in self.chunks)

    async def run(self) -> None:
        chunk_queue: asyncio.Queue[str | None] = asyncio.Queue()
        audio_queue: asyncio.Queue = asyncio.Queue()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._generate(chunk_queue))
            tasks.create_task(self._synthesize(chunk_queue, audio_queue))
            tasks.create_task(self._play(audio_queue))

    async def _generate(self, chunks: asyncio.Queue) -> None:
        self.timings.request_at = self._clock()
        stream = self._llm.stream_chat(self._messages)
        said: set[str] = set()
        # Closed at once when the reply is cancelled at a wait below, which is outside the stream.
        async with contextlib.aclosing(stream):
            async for delta in stream:
                if self.timings.llm_ttft_ms is None:
                    self.timings.llm_ttft_ms = self._ms_since(self.timings.request_at)
                if not all(self._put_chunk(chunks, chunk, said) for chunk in self._chunker.push(delta)):
                    break
                if self.timings.first_chunk_ms is not None:
                    await self._first_chunk_synthesized.wait()
            else:
                for chunk in self._chunker.flush():
                    self._put_chunk(chunks, chunk, said)
        chunks.put_nowait(None)

    def _put_chunk(self, chunks: asyncio.Queue, text: str, said: set[str]) -> bool:
        """Queue ``text`` for synthesis; False if the answer already said it.

        Small models fall into loops ("I'm not. I'm not. I'm not. ..."): an
        answer ends at its first repeated chunk instead of talking for a minute
        and filling the history, and so every later prompt, with the loop.
        """
        key = " ".join(words(text.lower()))
        if key in said:
            return False
        said.add(key)
        if self.timings.first_chunk_ms is None:
            self.timings.first_chunk_ms = self._ms_since(self.timings.request_at)
        chunks.put_nowait(text)
        return True

    async def _synthesize(self, chunks: asyncio.Queue, audio: asyncio.Queue) -> None:
        index = 0
        while (text := await chunks.get()) is not None:
            handed_at = self._clock()
            resampler = StreamResampler(self._tts.sample_rate, self._rate)
            pending = np.zeros(0, dtype=np.float32)
            chunk = SpokenChunk(text)
            first = True
            async for piece in self._tts.synthesize(text):
                if first and index == 0:
                    self.timings.tts_ttfa_ms = self._ms_since(handed_at)
                if first:
                    audio.put_nowait(chunk)  # a chunk starts
                    first = False
                chunk.synthesized_s += len(piece) / self._tts.sample_rate
                pending = self._queue_frames(audio, np.concatenate([pending, resampler.process(piece)]))
            self._first_chunk_synthesized.set()
            if first:
                continue  # nothing speakable in this chunk
            tail = np.concatenate([pending, resampler.process(np.zeros(0, np.float32), last=True)])
            # Pad the tail to whole frames: telephony wants fixed 20 ms frames.
            self._queue_frames(audio, np.pad(tail, (0, -len(tail) % self._frame)))
            audio.put_nowait(_ChunkDone(index))
            index += 1
        audio.put_nowait(None)

    def _queue_frames(self, audio: asyncio.Queue, samples: np.ndarray) -> np.ndarray:
        """Queue every whole frame of ``samples``; return the remainder."""
        whole = len(samples) - len(samples) % self._frame
        for start in range(0, whole, self._frame):
            audio.put_nowait(samples[start : start + self._frame])
        return samples[whole:]

    def resume(self) -> None:
        self._flowing.set()

    def pause(self) -> None:
        self._flowing.clear()

    async def _play(self, audio: asyncio.Queue) -> None:
        await self._flowing.wait()
        while (item := await audio.get()) is not None:
            if isinstance(item, SpokenChunk):
                item.start_s = self._sent_s
                self.chunks.append(item)
                self._emit(Transcript("agent", self.text, final=False))
                continue
            if isinstance(item, _ChunkDone):
                chunk = self.chunks[-1]
                chunk.end_s = self._sent_s
                chunk.mark = f"{self.turn}.{item.index}"
                self._emit(Mark(chunk.mark))
                continue
            if (delay := self.playback.delay()) > 0:
                await asyncio.sleep(delay)
            await self._flowing.wait()
            self._emit(AgentAudio(item))
            duration = len(item) / self._rate
            self.playback.sent(duration)
            self._sent_s += duration
            if self.timings.first_audio_at is None:
                self.timings.first_audio_at = self._clock()
                if self._on_first_audio is not None:
                    self._on_first_audio(self)
        # Let the client finish playing before the reply counts as done.
        if (remaining := self.playback.buffered_s()) > 0:
            await asyncio.sleep(remaining)

    def mark_played(self, name: str) -> None:
        for chunk in self.chunks:
            if chunk.mark == name and chunk.end_s is not None:
                self._marked = (chunk.end_s, self._clock())

    def heard_s(self) -> float:
        """How much of the answer the user has heard, from client marks or the playback model."""
        estimate = self.playback.played_s()
        if self._marked is not None:
            offset, confirmed_at = self._marked
            estimate = max(offset, min(estimate, offset + self._clock() - confirmed_at))
        return min(estimate, self._sent_s)

    @property
    def sent_s(self) -> float:
        """Seconds of audio sent to the client so far."""
        return self._sent_s

    def heard_text(self) -> str:
        return self.text_until(self.heard_s())

    def text_until(self, heard: float) -> str:
        """The words spoken in the first ``heard`` seconds of the answer's audio."""
        words: list[str] = []
        for chunk in self.chunks:
            if heard <= chunk.start_s:
                break
            chunk_words = chunk.text.split()
            end = chunk.end_s if chunk.end_s is not None else chunk.start_s + chunk.synthesized_s
            if heard >= end:
                words += chunk_words
            else:
                fraction = (heard - chunk.start_s) / max(end - chunk.start_s, 1e-6)
                words += chunk_words[: int(len(chunk_words) * fraction)]
                break
        return " ".join(words)

    def _ms_since(self, start: float) -> float:
        return (self._clock() - start) * 1000.0
