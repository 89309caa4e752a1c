"""One conversation: listening, turn taking, replies, barge-in and history.

The session is fed input events by a protocol codec and emits output events
through ``emit``. It never touches a socket. Audio is analysed as it arrives:
the VAD runs inline (a window costs about 0.2 ms), while Whisper, the LLM and
Piper run in worker threads.

Timeline: every 16 kHz sample that reaches the VAD has an index; the arrival
time of each frame is remembered, so the VAD's end-of-speech position maps
back to the wall-clock instant that audio arrived (``speech_end``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import numpy as np

from .audio import PIPELINE_RATE, StreamResampler
from .config import Settings
from .engines import Engines
from .protocols.events import (
    AudioReceived,
    Clear,
    Error,
    InputEvent,
    MarkPlayed,
    Metrics,
    OutputEvent,
    ProtocolError,
    SessionStarted,
    StreamStopped,
    TextReceived,
    Transcript,
)
from .reply import Reply
from .turn import TurnDetector, has_words
from .vad import WINDOW, WINDOW_MS

log = logging.getLogger(__name__)

PREROLL_SAMPLES = PIPELINE_RATE * 3 // 10  # keep 300 ms before detected speech: Silero fires late
SPEECH_TAIL_SAMPLES = PIPELINE_RATE // 10  # Whisper gets 100 ms past the last speech window
VAD_HYSTERESIS = 0.15
# Silero scores the first window of resumed speech 0.07 to 0.66 (a 32 ms window
# that is partly silence) and the silence of a pause under 0.05
# (scripts/endpoint_turns): a turn is not committed on a window above this, in
# case the user is going on. Steady noise scores above it too, so at most
# RESUMING_WINDOWS a pause hold the commit back (96 ms).
RESUMING_PROBABILITY = 0.1
RESUMING_WINDOWS = 3
# The soxr high-quality filter holds back about 66 ms of 8 kHz input, medium
# quality about 26 ms; VAD and Whisper do not hear the difference, the user does.
INPUT_RESAMPLE_QUALITY = "MQ"
ARRIVAL_LOOKBACK_SAMPLES = 2 * PIPELINE_RATE  # frames that vouch for when audio arrived
BARGE_RECHECK_MS = 160  # more overlapping speech since the last check: look again
APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"


@dataclass
class TurnMetrics:
    turn: int
    speech_end: float = 0.0  # monotonic arrival time of the last speech sample
    endpoint_ms: float = 0.0
    stt_final_ms: float = 0.0
    stt_speculative: bool = False
    preemptive: bool = False


@dataclass
class UserTurn:
    id: int
    start: int  # sample index where the turn's audio starts
    last_speech: int  # sample index just past the last speech window
    speech_ms: float = 0.0
    partial_text: str = ""
    partial_upto: int = 0
    speculative_upto: int = -1  # last_speech that the speculative final was started for
    speculative: asyncio.Task | None = None
    preemptive_upto: int = -1  # speculative_upto that the preemptive reply answers
    preemptive: Reply | None = None
    preemptive_task: asyncio.Task | None = None
    metrics: TurnMetrics | None = None
    over_agent: bool = False  # began while the agent was speaking
    barge_check: asyncio.Task | None = None
    barge_checked_ms: float = 0.0  # speech_ms when the last barge-in check started
    resuming_windows: int = 0  # windows of this pause that held the commit back


class Session:
    def __init__(
        self,
        engines: Engines,
        settings: Settings,
        emit: Callable[[OutputEvent], None],
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.engines = engines
        self.settings = settings
        self.id = session_id
        self._emit = emit
        self._clock = clock
        self.sample_rate = PIPELINE_RATE
        self.system_prompt = settings.system_prompt
        self._resampler = StreamResampler(self.sample_rate, PIPELINE_RATE, INPUT_RESAMPLE_QUALITY)
        self._vad = engines.vad.stream()
        self._turns = TurnDetector(
            settings.end_silence_complete_ms,
            settings.end_silence_ms,
            settings.end_silence_incomplete_ms,
            settings.max_turn_s,
        )
        self._turn_ids = itertools.count(1)
        phrases = {" ".join(p.lower().replace("-", " ").split()) for p in settings.barge_in_backchannels.split(",")}
        phrases.discard("")
        # Longest first, so that "mm hm" is taken whole before "mm".
        alternatives = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
        self._backchannels = re.compile(rf"\b(?:{alternatives})\b") if phrases else None
        # Audio and timeline.
        self._audio = np.zeros(0, dtype=np.float32)
        self._audio_start = 0  # sample index of self._audio[0]
        self._received = 0  # samples received so far
        self._analysed = 0  # samples the VAD has seen
        self._arrivals: deque[tuple[int, float]] = deque()
        # Turn taking.
        self._speech_run_ms = 0.0
        self._turn: UserTurn | None = None
        self._partial_task: asyncio.Task | None = None
        self._respond_task: asyncio.Task | None = None
        self._reply: Reply | None = None
        self._pending_start: int | None = None  # audio of a turn whose answer never began
        self.history: list[dict[str, str]] = []
        self._prefill: asyncio.Task | None = None
        self.closed = False

    @property
    def answering(self) -> bool:
        """An answer (or fixed words) is being prepared or spoken: a graceful shutdown waits for it."""
        return self._respond_task is not None

    # Input.

    def handle(self, event: InputEvent) -> None:
        """Take one input event. Never blocks; long work goes to tasks."""
        if self.closed:
            return
        if isinstance(event, AudioReceived):
            self._on_audio(event.samples)
        elif isinstance(event, SessionStarted):
            self._on_start(event)
        elif isinstance(event, MarkPlayed):
            if self._reply is not None:
                self._reply.mark_played(event.name)
        elif isinstance(event, TextReceived):
            self._on_text(event.text)
        elif isinstance(event, StreamStopped):
            if self._turn is not None:
                self._commit(self._turn)
        elif isinstance(event, ProtocolError):
            log.warning("session %s: %s: %s", self.id, event.code, event.message)
            self._emit(Error(event.code, event.message))

    def _on_start(self, event: SessionStarted) -> None:
        self.sample_rate = event.sample_rate
        self._resampler = StreamResampler(self.sample_rate, PIPELINE_RATE, INPUT_RESAMPLE_QUALITY)
        prompt = event.options.get("system_prompt")
        if isinstance(prompt, str) and prompt.strip():
            self.system_prompt = prompt.strip()
        greeting = event.options.get("greeting")
        if isinstance(greeting, str) and greeting.strip():
            self._say(greeting.strip())

    def _say(self, text: str) -> None:
        """Say fixed words (a greeting, an apology) as a reply that can be interrupted like any other."""
        reply = self._new_reply(0, "", _Scripted(text), [], None)
        self._speak(reply)

    def _speak(self, reply: Reply) -> None:
        """Run ``reply`` from scratch and let the user hear it."""
        self._respond_task = asyncio.create_task(self._play(reply, asyncio.create_task(reply.run())))

    def _on_text(self, text: str) -> None:
        self._interrupt()
        turn = UserTurn(next(self._turn_ids), self._received, self._received)
        metrics = TurnMetrics(turn.id, speech_end=self._clock())
        self._emit(Transcript("user", text, final=True))
        reply = self._new_reply(turn.id, text, self.engines.llm, self._messages(text), metrics)
        self._speak(reply)

    def _on_audio(self, samples: np.ndarray) -> None:
        samples = self._resampler.process(samples)
        if not len(samples):
            return
        now = self._clock()
        self._audio = np.concatenate([self._audio, samples])
        self._received += len(samples)
        self._arrivals.append((self._received, now))
        for probability in self._vad.process(samples):
            self._analysed += WINDOW
            self._on_window(probability)
        self._trim_audio()

    def _on_window(self, probability: float) -> None:
        end = self._analysed
        threshold = self.settings.vad_threshold
        if probability >= threshold:
            self._speech_run_ms += WINDOW_MS
            if self._turn is not None:
                self._turn.last_speech = end
                self._turn.speech_ms += WINDOW_MS
                self._turn.resuming_windows = 0
                if self._turn.preemptive is not None:
                    self._drop_preemptive(self._turn)  # the user goes on: that answer is stale
            elif self._speech_run_ms >= self.settings.vad_min_speech_ms:
                self._begin_turn(end)
            if self._turn is not None:
                self._maybe_barge_in(self._turn)
                self._maybe_partial(self._turn)
        elif probability < threshold - VAD_HYSTERESIS:
            self._speech_run_ms = 0.0
        if self._turn is not None:
            self._check_end_of_turn(self._turn, end, probability)

    def _begin_turn(self, end: int) -> None:
        run = int(self._speech_run_ms * PIPELINE_RATE / 1000)
        start = max(self._audio_start, end - run - PREROLL_SAMPLES)
        if self._respond_task is not None and (self._reply is None or not self._reply.started_audio):
            # The user went on before the agent said anything: one turn, not two.
            self._cancel_reply()
            if self._pending_start is not None:
                start = self._pending_start
        self._pending_start = None
        self._turn = UserTurn(
            next(self._turn_ids), start, end, speech_ms=self._speech_run_ms, over_agent=self._reply is not None
        )
        log.debug("session %s: turn %d starts", self.id, self._turn.id)

    def _maybe_barge_in(self, turn: UserTurn) -> None:
        """Interrupt the agent for real speech, not for "mm-hm" or a cough.

        Past ``barge_in_min_speech_ms`` the agent pauses; past
        ``barge_in_check_ms`` the overlapping speech is transcribed, and only
        words beyond the backchannel list interrupt. Past ``barge_in_force_ms``
        of speech the agent stops whatever the words.
        """
        if self._reply is None or turn.speech_ms < self.settings.barge_in_min_speech_ms:
            return
        if self._backchannels is None or turn.speech_ms >= self.settings.barge_in_force_ms:
            self._barge_in(turn, "")
            return
        # Fall silent at once, as a person would, while the words are checked.
        self._reply.pause()
        if turn.speech_ms < self.settings.barge_in_check_ms:
            return
        checking = turn.barge_check is not None and not turn.barge_check.done()
        if not checking and turn.speech_ms - turn.barge_checked_ms >= BARGE_RECHECK_MS:
            turn.barge_checked_ms = turn.speech_ms
            audio = self._slice(turn.start, turn.last_speech)
            turn.barge_check = asyncio.create_task(self._check_barge_in(turn, audio))

    async def _check_barge_in(self, turn: UserTurn, audio: np.ndarray) -> None:
        try:
            text = await self.engines.stt.transcribe(audio)
        except Exception:
            log.exception("session %s: barge-in transcription failed", self.id)
            text = "?"  # unknown words: treat as speech
        if self._reply is None:
            return
        if self._is_backchannel(text):
            log.info("session %s: not an interruption: %r", self.id, text)
            self._reply.resume()
            return
        self._barge_in(turn, text)
        if self._turn is not turn:
            self._commit(turn)  # it ended while we listened: answer it now that the agent is quiet

    def _barge_in(self, turn: UserTurn, text: str) -> None:
        log.info("session %s: barge-in after %.0f ms of speech %r", self.id, turn.speech_ms, text)
        turn.over_agent = False
        self._interrupt()

    def _is_backchannel(self, text: str) -> bool:
        """Only acknowledgement words, or no words at all (a cough, a door).

        A lone letter other than "I" is a hum, not a word: at the 250 ms check
        Whisper wrote "N" for "Mm-hmm." (scripts/bargein_eval). A user who goes
        on is checked again as the speech grows.
        """
        words = " ".join(re.sub(r"[^a-z' ]", " ", text.lower().replace("-", " ")).split())
        if self._backchannels is not None:
            words = self._backchannels.sub("", words)
        return all(len(word) == 1 and word != "i" for word in words.split())

    def _interrupt(self) -> None:
        """Stop the agent now: every stage, the client's buffer, and the history."""
        reply = self._reply
        self._cancel_reply()
        if reply is not None and reply.started_audio:
            self._emit(Clear())
            heard = reply.heard_text()
            self._emit(Transcript("agent", heard, final=True))
            self._remember(reply, heard)

    def _cancel_reply(self) -> None:
        if self._respond_task is not None:
            self._respond_task.cancel()
        self._respond_task = None
        self._reply = None

    # Transcription.

    def _maybe_partial(self, turn: UserTurn) -> None:
        if self._partial_task is not None and not self._partial_task.done():
            return
        interval = self.settings.partial_interval_ms * PIPELINE_RATE // 1000
        if turn.last_speech - turn.partial_upto < interval:
            return
        upto = turn.last_speech
        audio = self._slice(turn.start, upto)
        self._partial_task = asyncio.create_task(self._partial(turn, audio, upto))

    async def _partial(self, turn: UserTurn, audio: np.ndarray, upto: int) -> None:
        try:
            text = await self.engines.stt.transcribe(audio)
        except Exception:  # a partial is optional; the final transcription will tell
            log.exception("session %s: partial transcription failed", self.id)
            return
        if self._turn is turn and upto > turn.partial_upto and text:
            turn.partial_text, turn.partial_upto = text, upto
            self._emit(Transcript("user", text, final=False))

    def _speculate(self, turn: UserTurn) -> None:
        """Run the final transcription as soon as a pause begins."""
        if turn.speculative_upto == turn.last_speech:
            return
        if turn.speculative is not None:
            turn.speculative.cancel()
        turn.speculative_upto = turn.last_speech
        audio = self._slice(turn.start, turn.last_speech + SPEECH_TAIL_SAMPLES)
        turn.speculative = asyncio.create_task(self._timed_transcribe(audio))

    async def _timed_transcribe(self, audio: np.ndarray) -> tuple[str, float]:
        started = self._clock()
        text = await self.engines.stt.transcribe(audio)
        return text, (self._clock() - started) * 1000.0

    def _check_end_of_turn(self, turn: UserTurn, now: int, probability: float) -> None:
        silence_ms = (now - turn.last_speech) * 1000 / PIPELINE_RATE
        if silence_ms < self.settings.stt_speculative_silence_ms:
            return
        self._speculate(turn)
        speculative = turn.speculative
        if (
            speculative is not None
            and speculative.done()
            and not speculative.cancelled()
            and speculative.exception() is None  # a failure surfaces when the turn commits
        ):
            text, stt_ms = speculative.result()
            self._preempt(turn, text, stt_ms)
        else:
            # The partial predates the last words ("We arrive." for "We arrive on"):
            # until the transcript of all of it is in, assume the user goes on.
            text = None
        turn_ms = (now - turn.start) * 1000 / PIPELINE_RATE
        if not self._turns.is_turn_over(silence_ms, text, turn_ms):
            return
        if probability >= RESUMING_PROBABILITY and turn.resuming_windows < RESUMING_WINDOWS:
            turn.resuming_windows += 1
            return
        self._commit(turn)

    def _commit(self, turn: UserTurn) -> None:
        if self._turn is turn:
            self._turn = None
        if self._reply is not None:
            if turn.barge_check is not None and not turn.barge_check.done():
                return  # the pending barge-in check decides, and commits the turn if it interrupts
            # Speech over the agent that never reached barge-in: a backchannel or noise.
            log.debug("session %s: ignoring %.0f ms of speech over the agent", self.id, turn.speech_ms)
            self._reply.resume()
            return
        metrics = turn.metrics or TurnMetrics(turn.id)
        metrics.speech_end = self._arrival_time(self._refine_end(turn.last_speech))
        metrics.endpoint_ms = (self._clock() - metrics.speech_end) * 1000.0
        self._pending_start = turn.start
        self._respond_task = asyncio.create_task(self._respond(turn, metrics))

    async def _respond(self, turn: UserTurn, metrics: TurnMetrics) -> None:
        task = turn.speculative
        if task is not None and turn.speculative_upto == turn.last_speech and not task.cancelled():
            metrics.stt_speculative = True
        else:
            audio = self._slice(turn.start, turn.last_speech + SPEECH_TAIL_SAMPLES)
            task = asyncio.create_task(self._timed_transcribe(audio))
        try:
            text, metrics.stt_final_ms = await task
        except Exception as exc:
            log.exception("session %s: transcription failed", self.id)
            self._emit(Error("stt_failed", f"transcription failed: {type(exc).__name__}"))
            self._respond_task = None
            self._pending_start = None
            self._say(APOLOGY)
            return
        if not has_words(text) or (turn.over_agent and self._is_backchannel(text)):
            log.info("session %s: turn %d had no words for the agent: %r", self.id, turn.id, text)
            self._respond_task = None
            self._pending_start = None
            return
        self._emit(Transcript("user", text, final=True))
        if turn.preemptive is not None and turn.preemptive_upto == turn.last_speech:
            reply, running = turn.preemptive, turn.preemptive_task
            metrics.preemptive = True
        else:
            self._drop_preemptive(turn)
            reply = self._new_reply(turn.id, text, self.engines.llm, self._messages(text), metrics)
            running = asyncio.create_task(reply.run())
        await self._play(reply, running)

    def _preempt(self, turn: UserTurn, text: str, stt_ms: float) -> None:
        """Start answering the speculative transcript, held back until the turn is committed."""
        if (
            not self.settings.preemptive_generation
            or not has_words(text)
            or turn.preemptive_upto == turn.speculative_upto
            or self._reply is not None  # speech over the agent: only a barge-in makes it a turn
        ):
            return
        self._drop_preemptive(turn)
        turn.metrics = TurnMetrics(turn.id, stt_final_ms=stt_ms)
        turn.preemptive_upto = turn.speculative_upto
        turn.preemptive = self._new_reply(
            turn.id, text, self.engines.llm, self._messages(text), turn.metrics, held=True
        )
        turn.preemptive_task = asyncio.create_task(turn.preemptive.run())

    def _drop_preemptive(self, turn: UserTurn) -> None:
        if turn.preemptive_task is not None:
            turn.preemptive_task.cancel()
        turn.preemptive = turn.preemptive_task = turn.metrics = None
        turn.preemptive_upto = -1

    def _messages(self, text: str) -> list[dict[str, str]]:
        return [*self._prompt_prefix(), {"role": "user", "content": text}]

    def _prompt_prefix(self) -> list[dict[str, str]]:
        """The system prompt and the history that the next question is asked after."""
        return [
            {"role": "system", "content": self.system_prompt},
            *recent_history(self.history, self.settings.history_turns),
        ]

    def _new_reply(
        self, turn: int, user_text: str, llm, messages: list, metrics: TurnMetrics | None, held: bool = False
    ) -> Reply:
        return Reply(
            llm=llm,
            tts=self.engines.tts,
            messages=messages,
            output_rate=self.sample_rate,
            lead_s=self.settings.output_lead_ms / 1000.0,
            emit=self._emit,
            turn=turn,
            user_text=user_text,
            first_chunk_min_words=self.settings.first_chunk_min_words,
            phrase_breaks=bool(self.settings.first_chunk_phrase_breaks),
            # Fixed words (a greeting, an apology: no user text) are said whole.
            max_sentences=self.settings.answer_max_sentences if user_text else 0,
            on_first_audio=None if metrics is None else (lambda reply: self._report(reply, metrics)),
            held=held,
            clock=self._clock,
        )

    async def _play(self, reply: Reply, running: asyncio.Task) -> None:
        """Make ``reply`` the one the user hears, and wait for it to end.

        Cancelling this task cancels ``running`` too: asyncio cancels the task
        that a cancelled task is waiting on.
        """
        self._reply = reply
        reply.resume()
        failed = False
        try:
            await running
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stage failed: tell the client, keep the session
            log.exception("session %s: reply failed", self.id)
            self._emit(Error("reply_failed", f"the answer failed: {type(exc).__name__}"))
            failed = True
        if self._reply is reply:
            self._emit(Transcript("agent", reply.text, final=True))
            self._remember(reply, reply.text)
            self._reply = None
            self._respond_task = None
            # Apologize for a failed answer to the user; never for fixed words, so no loop.
            if failed and reply.user_text:
                self._say(APOLOGY)

    def _remember(self, reply: Reply, heard: str) -> None:
        self._pending_start = None
        if reply.user_text:  # a greeting answers nobody
            self.history.append({"role": "user", "content": reply.user_text})
        self.history.append({"role": "assistant", "content": heard})
        if self._prefill is None or self._prefill.done():
            self._prefill = asyncio.create_task(self._prefill_next_prompt())

    async def _prefill_next_prompt(self) -> None:
        """Let the LLM evaluate the next prompt's system prompt and history while the user listens or speaks."""
        try:
            await self.engines.llm.prefill(self._prompt_prefix())
        except Exception:  # only a hint: the next answer evaluates it instead
            log.exception("session %s: prefilling the LLM cache failed", self.id)

    def _report(self, reply: Reply, metrics: TurnMetrics) -> None:
        self._pending_start = None
        t = reply.timings
        values = {
            "turn": metrics.turn,
            "voice_to_voice_ms": _round((t.first_audio_at - metrics.speech_end) * 1000.0),
            "endpoint_ms": _round(metrics.endpoint_ms),
            "stt_final_ms": _round(metrics.stt_final_ms),
            "stt_speculative": metrics.stt_speculative,
            "preemptive": metrics.preemptive,
            "llm_ttft_ms": _round(t.llm_ttft_ms),
            "first_chunk_ms": _round(t.first_chunk_ms),
            "tts_ttfa_ms": _round(t.tts_ttfa_ms),
        }
        log.info("session %s: metrics %s", self.id, values)
        self._emit(Metrics(values))

    # Timeline.

    def _slice(self, start: int, end: int) -> np.ndarray:
        return self._audio[max(0, start - self._audio_start) : max(0, end - self._audio_start)].copy()

    def _refine_end(self, window_end: int) -> int:
        """Where speech really ends inside the last speech window.

        Silero marks whole 32 ms windows, and its state decays for a window or
        so after speech stops, so the window's end is late by 4-48 ms. The end
        of the last 8 ms block within 20 dB of the loudest block in the last two
        windows is closer to what a listener (or the replay client) would say.
        """
        block = WINDOW // 4
        audio = self._slice(window_end - 2 * WINDOW, window_end)
        blocks = len(audio) // block
        if blocks == 0:
            return window_end
        rms = np.sqrt(np.mean(audio[len(audio) - blocks * block :].reshape(blocks, block) ** 2, axis=1))
        loud = np.flatnonzero(rms >= 0.1 * rms.max())
        return window_end - (blocks - 1 - int(loud[-1])) * block if len(loud) else window_end

    def _arrival_time(self, sample: int) -> float:
        """When ``sample`` arrived, on the audio's own clock.

        A frame's processing time is late by however long the event loop was
        busy, so each frame gives an upper bound on when the stream's time zero
        arrived; the smallest over the last seconds is the least delayed. For a
        client that sends at real time this removes our own stalls from
        ``speech_end``; for one that sends faster it changes nothing.
        """
        frame_end, processed = next(
            ((end, arrived) for end, arrived in self._arrivals if end >= sample), (sample, self._clock())
        )
        # Only frames up to the one holding the sample: later ones from a fast client would vouch too early.
        recent = [
            arrived - end / PIPELINE_RATE
            for end, arrived in self._arrivals
            if sample - ARRIVAL_LOOKBACK_SAMPLES <= end <= frame_end
        ]
        return min([processed] + [offset + frame_end / PIPELINE_RATE for offset in recent])

    def _trim_audio(self) -> None:
        keep_from = self._received - PREROLL_SAMPLES - int(self.settings.max_turn_s * PIPELINE_RATE)
        for start in (self._turn.start if self._turn else None, self._pending_start):
            if start is not None:
                keep_from = min(keep_from, start)
        if self._turn is None and self._pending_start is None:
            keep_from = max(keep_from, self._received - PREROLL_SAMPLES)
        if keep_from > self._audio_start:
            self._audio = self._audio[keep_from - self._audio_start :]
            self._audio_start = keep_from
        while len(self._arrivals) > 1 and self._arrivals[0][0] < self._audio_start:
            self._arrivals.popleft()

    async def close(self) -> None:
        """Stop everything this session started."""
        self.closed = True
        tasks = [t for t in (self._respond_task, self._partial_task, self._prefill) if t is not None]
        if self._turn is not None:
            turn = self._turn
            tasks += [t for t in (turn.speculative, turn.preemptive_task, turn.barge_check) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._reply = None
        self._respond_task = None


def recent_history(history: list[dict[str, str]], turns: int) -> list[dict[str, str]]:
    """The last exchanges of ``history`` (user, assistant pairs) for the prompt: at most ``turns``.

    The oldest kept exchange moves in steps of half the window, not one at a
    time: an LLM reuses its cache only for an unchanged prompt prefix, and a
    window sliding every turn changes the prefix right after the system prompt,
    so every answer would evaluate the whole history again (about 800 ms for
    eight exchanges with llama.cpp on 2 cores). Stepped, three answers in four
    find the history already evaluated, for keeping on average a quarter fewer
    exchanges.
    """
    exchanges = len(history) // 2
    if turns <= 0:
        return []
    if exchanges <= turns:
        return history
    step = max(1, turns // 2)
    dropped = -(-(exchanges - turns) // step) * step  # rounded up to a whole step
    # Counted from the end: a greeting may stand alone before the first exchange.
    return history[-2 * (exchanges - dropped) :]


class _Scripted:
    """Stands in for the LLM when the words are known in advance: they go through the chunker and TTS as usual."""

    name = "scripted"

    def __init__(self, text: str):
        self._text = text

    async def stream_chat(self, messages: list[dict[str, str]]) -> AsyncIterator[str]:
        yield self._text


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
