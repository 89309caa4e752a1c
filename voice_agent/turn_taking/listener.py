"""The user's side of a session: audio in, user turns out.

It resamples the input, cancels its echo, keeps it on the timeline, runs the
VAD inline (about 0.2 ms a window) and follows the current user turn: partial
transcripts, the speculative final one when a pause begins, and the end of the
turn. Who has the floor it asks :class:`OverAgent`; the turns go to the
session, :class:`TurnTaker`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..audio import PIPELINE_RATE, StreamResampler
from ..config import Settings
from ..echo_reference import INPUT_SAMPLES as ECHO_INPUT_SAMPLES
from ..echo_suppression import FIT_S as ECHO_FIT_S
from ..engines.interfaces import SpeechStream
from ..engines.stt_queue import SessionSTT
from ..engines.vad import PREROLL_SAMPLES, WINDOW, WINDOW_MS
from ..log import log_exception
from ..protocols.events import OutputEvent, Transcript
from .echo_canceller import input_canceller
from .pause_habit import MIN_PAUSE_MS
from .timeline import AudioTimeline
from .turn import Completeness, TurnSignals, classify
from .turn_detection import turn_detector
from .user_turn import UserTurn

log = logging.getLogger(__name__)

# Kept between turns: the pre-roll, the echo test, and the echo alone before speech over the agent, which
# the barge-in check fits the echo path on.
IDLE_KEEP_SAMPLES = max(PREROLL_SAMPLES, ECHO_INPUT_SAMPLES, int(ECHO_FIT_S * PIPELINE_RATE))
VAD_HYSTERESIS = 0.15
# Silero scores resumed speech's first window 0.07 to 0.66, a pause's silence under 0.05: no commit on a window
# above this, in case the user goes on; steady noise scores above it too, so at most RESUMING_WINDOWS hold it.
RESUMING_PROBABILITY = 0.1
RESUMING_WINDOWS = 3
MIN_COMMIT_SAMPLES = PIPELINE_RATE // 10  # a client commit needs 100 ms of audio, as the Realtime API's does


def input_resampler(rate: int) -> StreamResampler:
    """Resamples a client's input at ``rate`` to the pipeline's rate, as it comes: upsampling by cubic
    interpolation, which has no look-ahead (soxr's medium filter would delay speech by 100 ms); downsampling by
    the medium filter, which keeps the band above 8 kHz out of the speech."""
    return StreamResampler(rate, PIPELINE_RATE, "QQ" if rate < PIPELINE_RATE else "MQ")


class TurnTaker(Protocol):
    """What the listener tells the session."""

    def user_partial(self, turn: UserTurn, transcript: str) -> None: ...

    def user_pauses(self, turn: UserTurn, transcript: str, stt_ms: float) -> None:
        """``turn``'s speculative final transcript is in, and the user is still silent."""

    def commit(self, turn: UserTurn) -> None: ...


class OverAgent(Protocol):
    """What the listener asks of the speech over the agent (:mod:`.interruptions`)."""

    def begin_turn(self, start: int) -> tuple[int, bool]:
        """Speech makes a turn from sample ``start``: where it really starts, and whether it is over the agent."""

    def user_speaks(self, turn: UserTurn) -> None: ...

    def speech_begins(self, start: int) -> None:
        """A speech window, its run from sample ``start``, before there is speech enough for a turn."""

    def speech_faded(self) -> None: ...

    def holds_floor(self, turn: UserTurn) -> bool:
        """Whether ``turn`` is speech over the agent that has not taken the floor from it."""

    def kept_start(self) -> int | None:
        """The earliest sample that a turn which ended still needs."""

    def hears_own_voice(self, start: int, end: int) -> bool:
        """Whether the input up to sample ``end`` is the agent's own output coming back; the speech that it
        would be part of (the turn under way, or the run of speech windows) began at sample ``start``."""
        ...


class Listener:
    def __init__(
        self,
        settings: Settings,
        vad: SpeechStream,
        stt: Callable[[], SessionSTT],
        emit: Callable[[OutputEvent], None],
        turn_taker: TurnTaker,
        over_agent: OverAgent,
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.sample_rate = PIPELINE_RATE
        self.timeline = AudioTimeline(clock)
        self.turn: UserTurn | None = None  # the user turn under way
        self.turn_ids = itertools.count(1)  # shared with turns typed as text
        self._resampler = input_resampler(self.sample_rate)
        self.echo_canceller = input_canceller(settings, clock=clock)  # None: the input goes to the VAD as it comes
        self._client_cancels_echo = False
        self.noise_suppression = bool(settings.noise_suppression)
        self._vad, self._stt, self._emit = vad, stt, emit
        self._turn_taker, self._over_agent = turn_taker, over_agent
        self._id, self._clock = session_id, clock
        self._detector = turn_detector(settings)
        # The last committed turn (start, last speech, ended on a finished sentence): if it merges, a pause learnt.
        self._last_commit: tuple[int, int, bool] | None = None
        self._gap_since_commit = 0
        self._analysed = 0  # samples the VAD has seen
        self._probability = 0.0  # the VAD's last window, as the end-of-turn check read it
        self._speech_run_ms = 0.0
        self._partial_task: asyncio.Task | None = None
        self._preroll = PREROLL_SAMPLES
        self.manual = False  # turn_detection null: no VAD; the client commits the audio since the last commit
        self._buffer_start = 0

    def configure(self, settings: Settings, preroll_samples: int, manual: bool) -> None:
        """This session's own VAD threshold and end-of-turn silences, pre-roll, and who ends turns."""
        self.settings = settings
        self._detector = turn_detector(settings, self._detector.habit)
        self._preroll = preroll_samples
        if manual and not self.manual:
            self.clear()
        self.manual = manual

    def clear(self) -> None:
        """Forget the audio not committed yet: the turn under way, or the manual buffer."""
        self._buffer_start = self.timeline.received
        self._speech_run_ms = 0.0
        turn, self.turn = self.turn, None
        if turn is not None:
            for task in turn.tasks():
                task.cancel()

    def committed(self, turn: UserTurn) -> None:
        """``turn`` is committed: the next speech makes a new one."""
        if self.turn is turn:
            self.turn = None

    def take_buffer(self) -> tuple[int, int] | None:
        """Manual turns: the audio (start, end) since the last commit or clear, or None if under 100 ms."""
        start, end = self._buffer_start, self.timeline.received
        if end - start < MIN_COMMIT_SAMPLES:
            return None
        self._buffer_start = end
        return start, end

    def client_cancels_echo(self) -> None:
        """The client's input is echo-cancelled already: ``--echo-cancellation auto`` leaves it alone."""
        self._client_cancels_echo = True
        self.echo_canceller = input_canceller(self.settings, True, self.noise_suppression, self._clock)

    def suppress_noise(self, on: bool) -> None:
        """This session's own noise suppression; a new canceller converges on the echo path again."""
        if on != self.noise_suppression:
            self.noise_suppression = on
            self.echo_canceller = input_canceller(self.settings, self._client_cancels_echo, on, self._clock)

    def set_sample_rate(self, rate: int) -> None:
        self.sample_rate = rate
        self._resampler = input_resampler(rate)

    def feed(self, samples: np.ndarray) -> None:
        """Audio at :attr:`sample_rate`, as it arrives."""
        samples = self._resampler.process(samples)
        if self.echo_canceller is not None:
            samples = self.echo_canceller.process(samples)
        if not len(samples):
            return
        self.timeline.append(samples)
        if not self.manual:  # manual turns: no VAD, the client commits the audio
            for probability in self._vad.process(samples):
                self._analysed += WINDOW
                self._on_window(probability)
        self._trim_audio()

    def _on_window(self, probability: float) -> None:
        end = self._analysed
        threshold = self.settings.vad_threshold
        if probability >= threshold and self._over_agent.hears_own_voice(self._speech_start(end), end):
            # The agent's voice through the client's loudspeaker: silence from the user. The pre-roll
            # still reaches back over such windows: the echo test also takes the onset of a user
            # speaking over the agent for echo, and a lost "Stop" costs more than an echoed word.
            probability = 0.0
        if probability >= threshold:
            self._speech_run_ms += WINDOW_MS
            if self.turn is not None:
                self._learn_pause(self.turn, end)
                self.turn.on_speech(end)
            elif self._speech_run_ms >= self.settings.vad_min_speech_ms:
                run_start = self._run_start(end)
                if self._last_commit is not None:
                    self._gap_since_commit = run_start - self._last_commit[1]
                start = max(self.timeline.start, run_start - self._preroll)
                start, over_agent = self._over_agent.begin_turn(start)
                self.turn = UserTurn(
                    next(self.turn_ids),
                    start,
                    end,
                    speech_ms=self._speech_run_ms,
                    over_agent=over_agent,
                    timeline=self.timeline,
                    stt=self._stt(),
                    clock=self._clock,
                    speech_start=min(run_start, start + self._preroll),  # a merged turn's: its first part's
                    on_news=self._on_news,
                )
                log.debug("session %s: turn %d starts", self._id, self.turn.id)
            if self.turn is not None:
                self._learn_merge(self.turn)
                self._over_agent.user_speaks(self.turn)
                self._maybe_partial(self.turn)
            else:
                self._over_agent.speech_begins(self._run_start(end))
        elif probability < threshold - VAD_HYSTERESIS:
            if self._speech_run_ms and self.turn is None:
                self._over_agent.speech_faded()
            self._speech_run_ms = 0.0
        self._probability = probability
        if self.turn is not None:
            self._check_end_of_turn(self.turn, end, probability)

    def _speech_start(self, end: int) -> int:
        """Where the speech that the window ending at sample ``end`` would be part of began: the turn under way,
        or the run of speech windows, this one included."""
        if self.turn is not None:
            return self.turn.start
        return self._run_start(end - WINDOW)

    def _run_start(self, end: int) -> int:
        """Where the run of speech windows up to sample ``end`` began."""
        return end - int(self._speech_run_ms * PIPELINE_RATE / 1000)

    def _on_news(self, turn: UserTurn) -> None:
        """``turn``'s speculative transcript or a signal came in between two VAD windows: check again now, on
        the silence the last window measured, not up to 32 ms later."""
        if self.turn is not turn or self._probability >= RESUMING_PROBABILITY:
            return  # over, or the last window may be the user going on: the next one decides
        self._check_end_of_turn(turn, self._analysed, self._probability)

    def _maybe_partial(self, turn: UserTurn) -> None:
        if self._partial_task is not None and not self._partial_task.done():
            return
        interval = self.settings.partial_interval_ms * PIPELINE_RATE // 1000
        if turn.last_speech - turn.partial_upto >= interval:
            self._partial_task = asyncio.create_task(self._partial(turn, turn.last_speech))

    async def _partial(self, turn: UserTurn, upto: int) -> None:
        try:
            text = await turn.words(upto, self._stt().partial)
        except Exception:  # a partial is optional; the final transcription will tell
            log_exception(log, "session %s: partial transcription failed", self._id)
            return
        if text is None:  # dropped (the session's Whisper budget, a deep queue): the next waits for more speech
            turn.partial_upto = max(turn.partial_upto, upto)
            return
        if self.turn is turn and upto > turn.partial_upto and text:
            turn.partial_upto = upto
            self._emit(Transcript("user", text, final=False))
            self._turn_taker.user_partial(turn, text)

    def _check_end_of_turn(self, turn: UserTurn, now: int, probability: float) -> None:
        silence_ms = (now - turn.last_speech) * 1000 / PIPELINE_RATE
        if silence_ms < self.settings.stt_speculative_silence_ms:
            return
        if silence_ms >= self.settings.end_silence_complete_ms and self._over_agent.holds_floor(turn):
            # A "yeah", a cough or words still being checked, over the agent: their end lets a paused agent go
            # on at once, not at the end of a sentence.
            self._turn_taker.commit(turn)
            return
        turn.speculate()
        # Until the transcript of all the speech is in, assume the user goes on: a partial may predate the last words.
        signals = TurnSignals(None)
        if (speculative := turn.speculative_transcript()) is not None:
            text, stt_ms = speculative
            self._turn_taker.user_pauses(turn, text, stt_ms)
            signals = turn.end_of_turn_signals(text)
        turn_ms = (now - turn.start) * 1000 / PIPELINE_RATE
        if not self._detector.is_turn_over(silence_ms, signals, turn_ms):
            return
        if probability >= RESUMING_PROBABILITY and turn.resuming_windows < RESUMING_WINDOWS:
            turn.resuming_windows += 1
            return
        turn.decision = (signals, self._detector.required_silence_ms(signals))
        if log.isEnabledFor(logging.DEBUG):  # explain() reruns the decision: only for a reader of the debug log
            log.debug(
                "session %s: turn %d ends after %.0f ms, %s",
                self._id,
                turn.id,
                silence_ms,
                self._detector.explain(signals),
            )
        self._last_commit = (turn.start, turn.last_speech, classify(signals.transcript) is Completeness.COMPLETE)
        self._turn_taker.commit(turn)

    def _learn_pause(self, turn: UserTurn, end: int) -> None:
        """Speech again in ``turn``: a pause after a finished sentence was the user thinking."""
        pause_ms = (end - WINDOW - turn.last_speech) * 1000 / PIPELINE_RATE
        if pause_ms < MIN_PAUSE_MS:
            return
        speculative = turn.speculative_transcript()
        if speculative is not None and classify(speculative[0]) is Completeness.COMPLETE:
            self._detector.habit.went_on_after(pause_ms)

    def _learn_merge(self, turn: UserTurn) -> None:
        """``turn`` took in the committed one before it: the user was only pausing there."""
        if self._last_commit is None or turn.start > self._last_commit[0]:
            return
        _, _, finished = self._last_commit
        self._last_commit = None
        if finished:
            self._detector.habit.went_on_after(self._gap_since_commit * 1000 / PIPELINE_RATE, into_answer=True)

    def _trim_audio(self) -> None:
        """Keep the current turn's audio, that which ended turns still need, and the pre-roll."""
        received = self.timeline.received
        keep_from = received - PREROLL_SAMPLES - int(self.settings.max_turn_s * PIPELINE_RATE)
        pending = self._over_agent.kept_start()
        for start in (self.turn.start if self.turn else None, pending):
            if start is not None:
                keep_from = min(keep_from, start)
        if self.turn is None and pending is None:
            keep_from = max(keep_from, received - max(self._preroll, IDLE_KEEP_SAMPLES))
        if self.manual:  # the uncommitted buffer, at most the last max_turn_s of it like a turn
            keep_from = max(self._buffer_start, received - int(self.settings.max_turn_s * PIPELINE_RATE))
        self.timeline.trim(keep_from)

    async def close(self) -> None:
        tasks = [t for t in (self._partial_task,) if t is not None]
        if self.turn is not None:
            tasks += self.turn.tasks()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
