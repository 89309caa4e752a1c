"""One user turn: its speech from the first speech window to its commit, and the work started on it.

A pause starts the final transcription speculatively, and maybe an answer,
held until the commit; more speech makes both stale. A long turn is read in
parts: once the audio since the last settled point is :data:`SETTLE_AFTER_S`
long, a pause of :data:`SETTLE_PAUSE_SAMPLES` settles it, and the part before
is read once, in the background: each pause then costs a reading of the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np

from ..agent.reply_factory import TurnMetrics
from ..audio import PIPELINE_RATE
from ..engines.stt_queue import SessionSTT
from ..engines.vad import WINDOW, WINDOW_MS
from ..reply.pipeline import Reply
from .timeline import AudioTimeline
from .turn import TurnSignals
from .turn_signals import PauseSignals

SPEECH_TAIL_SAMPLES = PIPELINE_RATE // 10  # Whisper gets 100 ms past the last speech window
SETTLE_AFTER_S = 15.0  # a question or a few sentences are read whole; under Whisper's 30 s window, one call a part
# Between phrases: longer than a stop consonant's silence, shorter than the pauses that end turns (350 ms).
SETTLE_PAUSE_SAMPLES = 6 * WINDOW  # 192 ms


class UserTurn:
    def __init__(
        self,
        id: int,
        start: int,
        last_speech: int,
        *,
        speech_ms: float,
        over_agent: bool,
        timeline: AudioTimeline,
        stt: SessionSTT,
        clock: Callable[[], float] = time.monotonic,
        speech_start: int | None = None,
        on_news: Callable[[UserTurn], None] | None = None,
    ):
        self.id = id
        self.start = start  # sample index where the turn's audio starts
        # Where its speech starts, past the pre-roll: the turn's own start when the listener does not know it.
        self.speech_start = start if speech_start is None else speech_start
        self.last_speech = last_speech  # sample index just past the last speech window
        self.speech_ms = speech_ms
        self.over_agent = over_agent  # began while the agent was speaking, and has not interrupted it
        self.began_over_agent = over_agent  # its audio may hold the agent's echo
        self.partial_upto = 0  # last_speech of the newest partial transcript
        self.barge_check: asyncio.Task | None = None
        self.barge_checked_ms = 0.0  # speech_ms when the last barge-in check started
        self.resuming_windows = 0  # windows of this pause that held the commit back
        self.may_withdraw = False  # began in the answer's grace: words withdraw it, and continue the answered turn
        self.signals: PauseSignals | None = None  # about the speculative transcript
        self.decision: tuple[TurnSignals, float] | None = None  # the signals and silence that ended the turn
        self._signals_upto = -1  # _speculative_upto that the signals are about
        self.metrics: TurnMetrics | None = None  # of the prepared answer
        self._announced = False  # the client was told it began (SpeechStarted)
        self._on_news = on_news  # the speculative transcript or a signal came in: the listener decides now
        self._timeline = timeline
        self._stt = stt
        self._clock = clock
        self._speculative: asyncio.Task | None = None
        self._speech_began_at: float | None = None
        self._speculative_upto = -1  # last_speech that the speculative final was started for
        self._prepared: tuple[Reply, asyncio.Task] | None = None
        self._prepared_upto = -1  # _speculative_upto that the prepared answer answers
        # A long turn's settled parts: their transcriptions, in order, and the sample where the rest begins.
        self._parts: list[asyncio.Task[str]] = []
        self._settled_upto = start

    def record_commit(self, metrics: TurnMetrics, now: float) -> None:
        """The turn is committed at ``now``: when its speech really ended, and what the decision was made on."""
        if self.decision is not None:
            signals, metrics.end_silence_ms = self.decision
            metrics.end_of_turn_logprob = signals.end_of_turn_logprob
            metrics.end_of_turn_llm_ms = None if self.signals is None else self.signals.llm_ms
        metrics.speech_end = self._timeline.arrival_time(self._timeline.refine_end(self.last_speech))
        metrics.endpoint_ms = (now - metrics.speech_end) * 1000.0

    def announce(self) -> bool:
        """Whether the client is still to be told that the turn began: true once."""
        announce, self._announced = not self._announced, True
        return announce

    def audio(self, tail: int = 0) -> np.ndarray:
        """The turn's audio up to the last speech, and ``tail`` samples more."""
        return self._timeline.slice(self.start, self.last_speech + tail)

    def on_speech(self, end: int) -> None:
        """A speech window ending at sample ``end``: the user goes on, so a prepared answer is stale."""
        pause = end - WINDOW - self.last_speech
        if pause >= SETTLE_PAUSE_SAMPLES:
            self._settle(self.last_speech + pause // 2)
        self.last_speech = end
        self.speech_ms += WINDOW_MS
        self.resuming_windows = 0
        self.drop_prepared()

    def speculate(self) -> None:
        """Run the final transcription as soon as a pause begins."""
        if self._speculative_upto == self.last_speech:
            return
        if self._speculative is not None:
            self._speculative.cancel()
        self._speculative_upto = self.last_speech
        self._speculative = asyncio.create_task(self._timed_transcribe(self.last_speech + SPEECH_TAIL_SAMPLES))
        self._speculative.add_done_callback(self._news)

    def _settle(self, cut: int) -> None:
        """A pause around sample ``cut``: transcribe the audio up to it once, if it is long enough to settle."""
        if cut - self._settled_upto < SETTLE_AFTER_S * PIPELINE_RATE:
            return
        self._parts.append(asyncio.create_task(self._stt.transcribe(self._timeline.slice(self._settled_upto, cut))))
        self._settled_upto = cut

    async def words(self, end: int, read: Callable[[np.ndarray], Awaitable[str | None]]) -> str | None:
        """The turn's words up to sample ``end``: its settled parts', then ``read``'s of the rest (None if
        ``read`` gives None)."""
        parts, start = list(self._parts), self._settled_upto
        rest = await read(self._timeline.slice(start, end))
        if rest is None:
            return None
        # Shielded: the parts belong to the turn, and serve its next transcripts too.
        texts = [await asyncio.shield(part) for part in parts]
        return " ".join(text for text in (*texts, rest) if text)

    def speculative_transcript(self) -> tuple[str, float] | None:
        """The speculative final (text, ms it took) once it is in; a failure surfaces at :meth:`final_transcript`."""
        task = self._speculative
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def extend_back(self, start: int) -> None:
        """The turn continues one from ``start`` whose answer was withdrawn: what was read or prepared is stale."""
        self.may_withdraw = False
        if start < self.start:  # the speech of the turn it continues began as far past its start as this one's
            self.speech_start -= self.start - start
            self.start = start
            self._speech_began_at = None
        if self._speculative is not None:
            self._speculative.cancel()
        self._speculative, self._speculative_upto = None, -1
        for part in self._parts:
            part.cancel()
        self._parts, self._settled_upto = [], self.start
        self.drop_prepared()
        if self.signals is not None:
            self.signals.cancel()
        self.signals, self._signals_upto = None, -1

    def speech_began_at(self) -> float:
        """When its speech began, on the audio's own clock (:meth:`AudioTimeline.arrival_time`)."""
        if self._speech_began_at is None:
            self._speech_began_at = self._timeline.arrival_time(self.speech_start)
        return self._speech_began_at

    @property
    def pausing(self) -> bool:
        """Whether the user has paused since the last speech: its final transcription has started."""
        return self._speculative_upto == self.last_speech

    @property
    def needs_signals(self) -> bool:
        """Whether the speculative transcript has no end-of-turn signals asked for yet."""
        return self._signals_upto != self._speculative_upto

    def gather(self, signals: PauseSignals) -> None:
        """``signals`` are about the speculative transcript."""
        if self.signals is not None:
            self.signals.cancel()
        self.signals, self._signals_upto = signals, self._speculative_upto
        for task in signals.tasks():
            task.add_done_callback(self._news)

    def _news(self, task: asyncio.Task) -> None:
        if self._on_news is not None and not task.cancelled():
            self._on_news(self)

    def end_of_turn_signals(self, transcript: str) -> TurnSignals:
        """What is known about the speculative ``transcript`` now: at least the words."""
        if self.signals is None or self._signals_upto != self._speculative_upto:
            return TurnSignals(transcript)
        return self.signals.current()

    async def final_transcript(self, metrics: TurnMetrics) -> str:
        """The transcript of the whole turn: the speculative one if it covers all the speech."""
        task = self._speculative
        if task is not None and self._speculative_upto == self.last_speech and not task.cancelled():
            metrics.stt_speculative = True
        else:
            task = asyncio.create_task(self._timed_transcribe(self.last_speech + SPEECH_TAIL_SAMPLES))
        text, metrics.stt_final_ms = await task
        return text

    async def _timed_transcribe(self, end: int) -> tuple[str, float]:
        started = self._clock()
        text = await self.words(end, self._stt.transcribe)
        return text or "", (self._clock() - started) * 1000.0

    @property
    def needs_answer(self) -> bool:
        """Whether the speculative transcript has no prepared answer yet."""
        return self._prepared_upto != self._speculative_upto

    def prepare(self, reply: Reply, metrics: TurnMetrics) -> None:
        """Start ``reply``, held, as the answer to the speculative transcript."""
        self.drop_prepared()
        self.metrics = metrics
        self._prepared_upto = self._speculative_upto
        self._prepared = (reply, asyncio.create_task(reply.run()))

    def prepared(self) -> tuple[Reply, asyncio.Task] | None:
        """The prepared answer and its task, if it answers all the speech."""
        return self._prepared if self._prepared_upto == self.last_speech else None

    def drop_prepared(self) -> None:
        if self._prepared is not None:
            self._prepared[1].cancel()
        self._prepared = self.metrics = None
        self._prepared_upto = -1

    def tasks(self) -> list[asyncio.Task]:
        """Everything still running for this turn."""
        prepared = None if self._prepared is None else self._prepared[1]
        signals = [] if self.signals is None else self.signals.tasks()
        return [t for t in (self._speculative, prepared, self.barge_check, *signals, *self._parts) if t is not None]
