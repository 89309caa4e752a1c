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

What the LLM writes is checked before it is spoken: the loop guard
(``repetition.py``) and a repeated chunk end the answer, the chunker ends it
at the sentence limit, and each chunk is rewritten into speakable text
(``speakable.py``), which is what TTS, the transcript and the history get.
The audio queue between TTS and the pacer holds about ``AUDIO_AHEAD_S`` of
frames, so a long answer is synthesized just ahead of playback, and a held or
paused reply stops synthesizing once that much waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..audio import StreamResampler
from ..engines.chunker import SentenceChunker, word_tokens
from ..engines.first_chunks import FirstChunks, has_audio_in_hand
from ..engines.interfaces import TTSBackend
from ..engines.llm.base import LLMBackend, Message, ToolCall
from ..engines.speakable import speakable
from ..protocols.events import AgentAudio, Mark, OutputEvent, Transcript
from .pacing import PlaybackClock
from .repetition import LoopGuard

log = logging.getLogger(__name__)

FRAME_MS = 20
# Said when the model wrote nothing a voice can say (a markdown table, a loop
# from its first word): the user asked, and silence would sound like a fault.
NOTHING_TO_SAY = "Sorry, I don't have a good answer to that."
# Piper writes a sentence in a few hundred milliseconds on a loaded CPU: three
# seconds of audio ahead leave it ample time to have the next one ready.
AUDIO_AHEAD_S = 3.0
# Piper starts every sentence with 20 to 40 ms of digital silence (its samples
# under 0.002 before the first phoneme, en_US-joe-medium) that the user would
# wait through before the answer's first word: the first chunk of an answer
# starts this long before its first sample at ONSET_LEVEL (about -50 dBFS),
# which keeps a soft onset ("h") whole. Later chunks keep theirs, a pause
# between two chunks.
ONSET_LEVEL = 0.003
ONSET_MARGIN_S = 0.005


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
        max_sentences: int = 0,
        audio_ahead_s: float = AUDIO_AHEAD_S,
        on_first_audio: Callable[[Reply], None] | None = None,
        held: bool = False,
        first_chunks: FirstChunks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._llm = llm
        self._first_chunks = first_chunks
        # The first-audio-first rule: it counts as waiting until its first chunk is synthesized, not only written,
        # and its later chunks' synthesis gives way too, with a margin for its slowest chunk (engines/first_chunks.py).
        self._first_audio_first = first_chunks is not None and first_chunks.first_audio_first
        self._tts = tts
        self._messages = messages
        self._rate = output_rate
        self._frame = output_rate * FRAME_MS // 1000
        self._emit = emit
        self._on_first_audio = on_first_audio
        self._clock = clock
        self._chunker = SentenceChunker(first_chunk_min_words, phrase_breaks, max_sentences, rewrite=speakable)
        self._loop_guard = LoopGuard()
        self._audio_ahead_frames = max(1, round(audio_ahead_s * 1000 / FRAME_MS))
        self.turn = turn
        self.user_text = user_text
        self.playback = PlaybackClock(lead_s, clock)
        self.timings = ReplyTimings()
        self.chunks: list[SpokenChunk] = []
        # Why the answer ended before the LLM stream did: "loop", "repeated_chunk" or "sentence_limit".
        self.cut_by: str | None = None
        self.said_nothing = False  # the model gave nothing speakable: NOTHING_TO_SAY was said instead
        # Calls of functions the client runs (client_tools.py), handed to it once the answer has been said.
        self.tool_calls: list[ToolCall] = []
        self._sent_s = 0.0
        self._marked: tuple[float, float] | None = None  # (audio offset, when the client confirmed it)
        # A held reply generates and synthesizes ahead but emits nothing until it flows: that is how an
        # answer is prepared while the turn may still go on. Its answer's holders stop and restart it.
        self._flowing = asyncio.Event()
        if not held:
            self._flowing.set()
        self._first_chunk_synthesized = asyncio.Event()
        self._chunk_took_s = 0.0  # the longest a chunk of this answer took to synthesize, on this machine's load

    @property
    def started_audio(self) -> bool:
        return self.timings.first_audio_at is not None

    @property
    def text(self) -> str:
        return " ".join(chunk.text for chunk in self.chunks)

    async def run(self) -> None:
        """Generate, synthesize and play the answer; a stage's failure is raised as that stage raised it."""
        chunk_queue: asyncio.Queue[str | None] = asyncio.Queue()
        audio_queue: asyncio.Queue = asyncio.Queue(self._audio_ahead_frames)
        if self._first_chunks is not None:
            self._first_chunks.waiting(self)  # until its first chunk is out (_put_chunk) or synthesized (_synthesize)
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._generate(chunk_queue))
                tasks.create_task(self._synthesize(chunk_queue, audio_queue))
                tasks.create_task(self._play(audio_queue))
        except ExceptionGroup as group:
            # One stage failed first and the others were cancelled: its exception is the answer's failure,
            # not the group that wraps it.
            raise _first_cause(group) from None
        finally:
            if self._first_chunks is not None:
                self._first_chunks.done(self)

    async def _generate(self, chunks: asyncio.Queue) -> None:
        self.timings.request_at = self._clock()
        stream = self._llm.stream_chat(self._messages)
        said: set[str] = set()
        # Closed at once when the reply is cancelled at a wait below, which is outside the stream.
        async with contextlib.aclosing(stream):
            async for delta in stream:
                if isinstance(delta, ToolCall):
                    self.tool_calls.append(delta)
                    continue
                if self.timings.llm_ttft_ms is None:
                    self.timings.llm_ttft_ms = self._ms_since(self.timings.request_at)
                if self._loop_guard.push(delta):
                    self.cut_by = "loop"  # the unfinished text holds the loop: it is dropped
                    break
                if not all(self._put_chunk(chunks, chunk, said) for chunk in self._chunker.push(delta)):
                    self.cut_by = "repeated_chunk"
                    break
                if self._chunker.done:
                    self.cut_by = "sentence_limit"
                    break
                if self.timings.first_chunk_ms is not None:
                    await self._first_chunk_synthesized.wait()
                    if self._first_chunks is not None:
                        await self._first_chunks.give_way(self, self._has_audio_in_hand)
            else:
                for chunk in self._chunker.flush():
                    self._put_chunk(chunks, chunk, said)
        if self.timings.first_chunk_ms is None and not self.tool_calls:  # a call alone needs no words
            self.said_nothing = True
            self._put_chunk(chunks, NOTHING_TO_SAY, said)
        chunks.put_nowait(None)

    def _put_chunk(self, chunks: asyncio.Queue, text: str, said: set[str]) -> bool:
        """Queue ``text`` (speakable already) for synthesis; False if the answer already said it.

        Small models fall into loops ("I'm not. I'm not. I'm not. ..."): an
        answer ends at its first repeated chunk instead of talking for a minute
        and filling the history, and so every later prompt, with the loop. A
        chunk that repeats the end of an earlier one is the same loop starting
        ("No, I'm not. I'm not.").
        """
        key = " ".join(word_tokens(text.lower()))
        if key in said or any(earlier.endswith(" " + key) for earlier in said):
            return False
        said.add(key)
        if self.timings.first_chunk_ms is None:
            self.timings.first_chunk_ms = self._ms_since(self.timings.request_at)
            if self._first_chunks is not None and not self._first_audio_first:
                self._first_chunks.done(self)
        chunks.put_nowait(text)
        return True

    async def _synthesize(self, chunks: asyncio.Queue, audio: asyncio.Queue) -> None:
        index = 0
        while (text := await chunks.get()) is not None:
            if index and self._first_chunks is not None and self._first_audio_first:
                # A later chunk: its audio is wanted only once what is in hand has played.
                await self._first_chunks.give_way(self, self._has_audio_in_hand, frees_instance=False)
            handed_at = self._clock()
            queued_s = 0.0  # of the time since, waiting for room in the audio queue: not the synthesis's
            resampler = StreamResampler(self._tts.sample_rate, self._rate)
            pending = np.zeros(0, dtype=np.float32)
            chunk = SpokenChunk(text)
            first = True
            before_onset = index == 0
            async for piece in self._tts.synthesize(text):
                if before_onset:
                    piece = piece[_onset(piece, self._tts.sample_rate) :]
                    before_onset = not len(piece)
                    if before_onset:
                        continue  # silence only, so far
                if first and index == 0:
                    self.timings.tts_ttfa_ms = self._ms_since(handed_at)
                    # Piper yields a sentence's audio at once and the first chunk is at
                    # most one sentence: it is synthesized, and the LLM may go on while
                    # its frames wait for room in the queue.
                    self._first_chunk_synthesized.set()
                    if self._first_chunks is not None:
                        self._first_chunks.done(self)
                queue_from = self._clock()
                if first:
                    await audio.put(chunk)  # a chunk starts
                    first = False
                chunk.synthesized_s += len(piece) / self._tts.sample_rate
                pending = await self._queue_frames(audio, np.concatenate([pending, resampler.process(piece)]))
                queued_s += self._clock() - queue_from
            self._first_chunk_synthesized.set()
            if self._first_chunks is not None:
                self._first_chunks.done(self)
            self._chunk_took_s = max(self._chunk_took_s, self._clock() - handed_at - queued_s)
            if first:
                continue  # nothing speakable in this chunk
            tail = np.concatenate([pending, resampler.process(np.zeros(0, np.float32), last=True)])
            # Pad the tail to whole frames: telephony wants fixed 20 ms frames.
            await self._queue_frames(audio, np.pad(tail, (0, -len(tail) % self._frame)))
            await audio.put(_ChunkDone(index))
            index += 1
        await audio.put(None)

    async def _queue_frames(self, audio: asyncio.Queue, samples: np.ndarray) -> np.ndarray:
        """Queue every whole frame of ``samples``, waiting for room; return the remainder."""
        whole = len(samples) - len(samples) % self._frame
        for start in range(0, whole, self._frame):
            await audio.put(samples[start : start + self._frame])
        return samples[whole:]

    @property
    def paused(self) -> bool:
        """Held, or paused: no frame goes out until it flows."""
        return not self._flowing.is_set()

    def set_flowing(self, flowing: bool) -> None:
        """Let the frames out, or hold them back (the answer's holders decide, :mod:`..turn_taking.answer`)."""
        if flowing:
            self._flowing.set()
        else:
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

    def _has_audio_in_hand(self) -> bool:
        """Whether the answer's next chunk may come later without a gap: it is held, or enough of its audio is
        still to be played (engines/first_chunks.py)."""
        if self.paused:
            return True
        synthesized = sum(chunk.synthesized_s for chunk in self.chunks)
        return has_audio_in_hand(
            synthesized - self.playback.played_s(), self._chunk_took_s if self._first_audio_first else 0.0
        )

    def _ms_since(self, start: float) -> float:
        return (self._clock() - start) * 1000.0


def _first_cause(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_cause(first) if isinstance(first, BaseExceptionGroup) else first


def _onset(samples: np.ndarray, rate: int) -> int:
    """Where the first chunk starts: ONSET_MARGIN_S before the first sample at ONSET_LEVEL; past all of silence."""
    loud = np.flatnonzero(np.abs(samples) >= ONSET_LEVEL)
    if not len(loud):
        return len(samples)
    return max(0, int(loud[0]) - round(ONSET_MARGIN_S * rate))
