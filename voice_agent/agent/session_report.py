"""Session reports: what was said and done in one session, and optionally a stereo recording of it.

A :class:`SessionRecorder` watches a session's input and output events as
they pass (audio, transcripts, ``clear``, metrics) and the tool calls the
agent makes, and builds a :class:`SessionReport` when the session ends:

- the transcript of both roles with times on the session's timeline, agent
  answers cut short by the user marked ``interrupted`` (their text is what
  the user heard);
- the tool calls with their arguments and results;
- the per-turn metrics the client also received.

A session in which nobody said or typed anything and nothing was answered
(a client that connected and hung up) has an empty report, which is not
delivered.

With recording on (and a report directory), it also keeps the audio: the
user's on the left, the agent's on the right, 16-bit, at the session's own
rate (what the codec announced: 24 kHz for a Realtime session, 8 kHz for a
call, the ``start`` message's rate on ``/ws``). The timeline is the user's
audio stream: a frame from the client is placed after the one before it, or
at its arrival time if the client paused sending; agent audio is placed
where the user's stream was when it was sent, and a ``clear`` drops the agent
audio the client had not played yet. Audio is kept in memory only until it
can no longer change (:data:`HOLD_S`), then appended to the WAV file about
once a second by one disk thread; the header is fixed up at the end. A
recording stops growing at ``--record-max-mb``.

The recording's parts are in :mod:`.session_recording`; :func:`.report_delivery.deliver` writes and posts the report.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..audio import PIPELINE_RATE, resample
from ..protocols.events import (
    AgentAudio,
    AudioReceived,
    Clear,
    Metrics,
    SessionConfig,
    SessionStarted,
    SessionUpdate,
    Transcript,
)
from .session_recording import DISK, Track, WavFile, file_stem
from .tool_loop import ToolRecord

log = logging.getLogger(__name__)

# A client frame arriving this much after the end of the one before it starts
# where it arrived: the client paused sending. Smaller gaps are network jitter.
PAUSE_S = 0.2
# Recorded audio stays in memory this long behind the session's clock: a clear may still cut agent
# audio sent ahead, and a client that paused may send a late burst. Older audio is final.
HOLD_S = 5.0
WRITE_EVERY_S = 1.0  # final audio goes to the disk thread in pieces of about this length


@dataclass
class TranscriptEntry:
    role: str  # "user" or "agent"
    text: str
    start_s: float  # on the session's timeline
    end_s: float
    interrupted: bool = False


@dataclass
class ToolCallEntry:
    id: str
    name: str
    arguments: Any  # the model's JSON arguments, parsed when they parse
    result: str | None
    ok: bool | None
    start_s: float
    duration_ms: float | None
    repeated: bool


@dataclass
class SessionReport:
    session_id: str
    started_at: str  # ISO 8601, UTC
    duration_s: float
    protocol: str  # the codec's name: "ws", "realtime", "twilio" or "telnyx"
    call_id: str | None = None
    sample_rate: int = PIPELINE_RATE  # the session's audio, and its recording
    transcript: list[TranscriptEntry] = field(default_factory=list)
    tool_calls: list[ToolCallEntry] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)  # the per-turn metrics
    end_reason: str = ""
    recording: str | None = None  # the WAV's file name, once one was written
    recording_truncated: bool = False  # it reached --record-max-mb and stopped there

    @property
    def empty(self) -> bool:
        """Nobody spoke or typed, no tool ran and nothing was answered: nothing worth keeping."""
        return not self.tool_calls and not self.turns and not any(e.role == "user" for e in self.transcript)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class SessionRecorder:
    """Builds one session's report from its events.

    ``recording_dir``: record the stereo audio there (``SESSION.wav``), at most ``max_recording_bytes``
    of it (0: no cap). The timeline's rate is the session's rate when its first audio passes; audio
    at another rate (a Realtime client that switched formats) is resampled to it.
    """

    def __init__(
        self,
        session_id: str,
        protocol: str,
        recording_dir: str = "",
        max_recording_bytes: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.session_id = session_id
        self.protocol = protocol
        self.call_id: str | None = None
        self.recording_dir = Path(recording_dir) if recording_dir else None
        self.max_recording_bytes = max_recording_bytes
        self._clock = clock
        self._t0 = clock()
        self._started_at = datetime.datetime.now(datetime.UTC)
        self.rate = PIPELINE_RATE  # the timeline's, and the recording's
        self._session_rate = PIPELINE_RATE  # the audio's, as it arrives
        self._audio_seen = False
        self._user = Track()
        self._agent = Track()
        self._user_samples = 0  # where the user's stream is, in samples, even when not recording
        self._transcript: list[TranscriptEntry] = []
        self._tools: list[ToolCallEntry] = []
        self._turns: list[dict[str, Any]] = []
        self._answer_start: int | None = None  # where the agent answer being spoken started
        self._agent_end = 0
        self._cleared = False
        self._wav: WavFile | None = None
        self._written = 0  # samples handed to the disk thread
        self._recorded_bytes = 0
        self._truncated = False
        self._finished: Future[None] | None = None

    @property
    def recording(self) -> bool:
        return self.recording_dir is not None and not self._truncated and self._finished is None

    # The timeline.

    def _clock_samples(self) -> int:
        return round((self._clock() - self._t0) * self.rate)

    def _now(self) -> int:
        """Where the session is now, in samples: the user's stream, or the clock while the client sends no audio."""
        return max(self._user_samples, self._clock_samples())

    def _seconds(self, sample: int) -> float:
        return round(sample / self.rate, 3)

    def _set_rate(self, rate: int) -> None:
        self._session_rate = rate
        if not self._audio_seen:
            self.rate = rate
            self._user_samples = self._clock_samples()

    def _on_timeline(self, samples: np.ndarray) -> np.ndarray:
        """``samples`` at the session's rate, at the timeline's; the first audio fixes the timeline's rate."""
        self._audio_seen = True
        if self._session_rate == self.rate:
            return samples
        return resample(samples, self._session_rate, self.rate)

    # Events.

    def observe_input(self, event: object) -> None:
        if isinstance(event, AudioReceived):
            samples = self._on_timeline(event.samples)
            start = self._clock_samples() - len(samples)
            if start < self._user_samples + PAUSE_S * self.rate:
                start = self._user_samples
            if self.recording:
                self._user.add(start, samples, self._written)
            self._user_samples = start + len(samples)
            self._write_final()
        elif isinstance(event, SessionStarted):
            self._set_rate(event.sample_rate)
        elif isinstance(event, SessionUpdate) and event.sample_rate is not None:
            self._set_rate(event.sample_rate)

    def observe_output(self, event: object) -> None:
        if isinstance(event, AgentAudio):
            samples = self._on_timeline(event.samples)
            start = max(self._agent_end, self._now())
            if self._answer_start is None:
                self._answer_start = start
            if self.recording:
                self._agent.add(start, samples, self._written)
            self._agent_end = start + len(samples)
            self._write_final()
        elif isinstance(event, Clear):
            # The client drops what it had not played: so does the recording.
            now = self._now()
            self._agent.cut(now)
            self._agent_end = min(self._agent_end, now)
            self._cleared = True
        elif isinstance(event, Transcript) and event.final:
            self._on_final(event)
        elif isinstance(event, Metrics):
            self._turns.append(dict(event.values))
        elif isinstance(event, SessionConfig):
            self._set_rate(event.sample_rate)

    def _on_final(self, event: Transcript) -> None:
        now = self._now()
        if event.role == "user":
            self._transcript.append(TranscriptEntry("user", event.text, self._seconds(now), self._seconds(now)))
            return
        start = self._answer_start if self._answer_start is not None else now
        end = max(start, min(self._agent_end, now) if self._cleared else self._agent_end)
        if event.text or self._answer_start is not None:
            self._transcript.append(
                TranscriptEntry("agent", event.text, self._seconds(start), self._seconds(end), self._cleared)
            )
        self._answer_start = None
        self._cleared = False

    def user_speech(self, start_s: float, end_s: float) -> None:
        """The span of the user's last committed turn, on the session's timeline, when the session knows it."""
        for entry in reversed(self._transcript):
            if entry.role == "user":
                entry.start_s, entry.end_s = round(start_s, 3), round(end_s, 3)
                return

    def tool_call(self, record: ToolRecord) -> None:
        try:
            arguments: Any = json.loads(record.arguments)
        except json.JSONDecodeError:
            arguments = record.arguments
        self._tools.append(
            ToolCallEntry(
                id=record.id,
                name=record.name,
                arguments=arguments,
                result=record.result,
                ok=record.ok,
                start_s=round(record.started_at - self._t0, 3),
                duration_ms=None if record.duration_ms is None else round(record.duration_ms, 1),
                repeated=record.repeated,
            )
        )

    # The recording.

    def _write_final(self) -> None:
        """Hand the audio that can no longer change to the disk thread, a second or more at a time."""
        if not self.recording:
            return
        final = min(self._now(), max(self._user_samples, self._clock_samples() - round(HOLD_S * self.rate)))
        if final - self._written >= WRITE_EVERY_S * self.rate:
            self._write(final)

    def _write(self, end: int) -> None:
        assert self.recording_dir is not None
        if end <= self._written:
            return
        stereo = np.stack([self._user.take(self._written, end), self._agent.take(self._written, end)], axis=1)
        frames = stereo.astype("<i2").tobytes()
        if self.max_recording_bytes and self._recorded_bytes + len(frames) > self.max_recording_bytes:
            frames = frames[: (self.max_recording_bytes - self._recorded_bytes) // 4 * 4]
            self._truncated = True
            self._user, self._agent = Track(), Track()  # nothing more is kept
            log.warning("session %s: the recording reached its size limit and stops here", self.session_id)
        if self._wav is None:
            self._wav = WavFile(self.recording_dir, file_stem(self.session_id), self.rate)
        self._recorded_bytes += len(frames)
        self._written = end
        if frames:
            DISK.submit(self._wav.append, frames)

    def _finish_recording(self, keep: bool) -> None:
        """Write what is left and close the WAV: renamed into place if ``keep``, deleted if not."""
        if self.recording:
            self._write(max(self._user.end, self._agent.end, self._written))
        wav = self._wav
        self._finished = DISK.submit(wav.finish, keep) if wav is not None else DISK.submit(lambda: None)

    # The report.

    def finish(self, end_reason: str = "") -> SessionReport:
        """The session is over: its report, with the recording finished (or deleted, for an empty report).

        The WAV is finished in the disk thread; :func:`.report_delivery.deliver` writes the JSON after it there.
        """
        if self._finished is None:
            self._finish_recording(keep=not self.report(end_reason).empty)
        return self.report(end_reason)

    def report(self, end_reason: str = "") -> SessionReport:
        """The report so far."""
        return SessionReport(
            session_id=self.session_id,
            started_at=self._started_at.isoformat(timespec="milliseconds"),
            duration_s=round(self._clock() - self._t0, 3),
            protocol=self.protocol,
            call_id=self.call_id,
            sample_rate=self.rate,
            transcript=list(self._transcript),
            tool_calls=sorted(self._tools, key=lambda t: t.start_s),
            turns=list(self._turns),
            end_reason=end_reason,
            recording=self._wav.name if self._wav is not None else None,
            recording_truncated=self._truncated,
        )
