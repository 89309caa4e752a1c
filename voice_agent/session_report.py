"""Session reports: what was said and done in one session, and optionally a stereo recording of it.

A :class:`SessionRecorder` watches a session's input and output events as
they pass (audio, transcripts, ``clear``, metrics) and the tool calls the
agent makes, and builds a :class:`SessionReport` when the session ends:

- the transcript of both roles with times on the session's timeline, agent
  answers cut short by the user marked ``interrupted`` (their text is what
  the user heard);
- the tool calls with their arguments and results;
- the per-turn metrics the client also received.

With recording on, it also keeps the audio: the user's on the left, the
agent's on the right, at the session's sample rate, 16-bit. The timeline is
the user's audio stream: a frame from the client is placed after the one
before it, or at its arrival time if the client paused sending; agent audio
is placed where the user's stream was when it was sent, and a ``clear``
drops the agent audio the client had not played yet. The recording is held
in memory until the session ends: about 115 MB an hour at 16 kHz (both
channels), 58 MB at 8 kHz.

:func:`deliver` writes the report (``--session-report-dir``, plus the WAV with
``--record``) and POSTs it as JSON (``--session-report-url``, retried with
backoff) in the background: nothing here waits on a disk or a network on
the audio path.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import time
import wave
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from .audio import PIPELINE_RATE, float_to_int16
from .protocols.events import AgentAudio, AudioReceived, Clear, Metrics, SessionStarted, Transcript
from .tool_loop import ToolRecord

log = logging.getLogger(__name__)

# A client frame arriving this much after the end of the one before it starts
# where it arrived: the client paused sending. Smaller gaps are network jitter.
PAUSE_S = 0.2
POST_ATTEMPTS = 5
POST_BACKOFF_S = 0.5  # doubled after each failed attempt: 0.5, 1, 2, 4 s


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
    protocol: str = "ws"
    call_id: str | None = None
    sample_rate: int = PIPELINE_RATE
    transcript: list[TranscriptEntry] = field(default_factory=list)
    tool_calls: list[ToolCallEntry] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)  # the per-turn metrics
    end_reason: str = ""
    recording: str | None = None  # the WAV's file name, when one was written
    # The stereo recording (user left, agent right) as WAV bytes; not part of the JSON.
    wav: bytes | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["wav"]
        return data


class _Track:
    """Mono audio placed at sample offsets; rendered once, at the end."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, np.ndarray]] = []
        self.end = 0

    def add(self, start: int, samples: np.ndarray) -> None:
        self.pieces.append((start, float_to_int16(samples)))
        self.end = start + len(samples)

    def cut(self, at: int) -> None:
        """Drop everything from sample ``at`` on."""
        kept = []
        for start, samples in self.pieces:
            if start < at:
                kept.append((start, samples[: at - start]))
        self.pieces = kept
        self.end = min(self.end, at)

    def render(self, length: int) -> np.ndarray:
        out = np.zeros(length, dtype=np.int16)
        for start, samples in self.pieces:
            piece = samples[: max(0, length - start)]
            out[start : start + len(piece)] = piece
        return out


class SessionRecorder:
    """Builds one session's report from its events; ``record`` keeps the stereo audio too."""

    def __init__(self, session_id: str, record: bool = False, clock: Callable[[], float] = time.monotonic):
        self.session_id = session_id
        self.record = record
        self.protocol = "ws"
        self.call_id: str | None = None
        self._clock = clock
        self._t0 = clock()
        self._started_at = datetime.datetime.now(datetime.UTC)
        self.rate = PIPELINE_RATE
        self._user = _Track()
        self._agent = _Track()
        self._user_samples = 0  # where the user's stream is, in samples, even when not recording
        self._transcript: list[TranscriptEntry] = []
        self._tools: list[ToolCallEntry] = []
        self._turns: list[dict[str, Any]] = []
        self._answer_start: int | None = None  # where the agent answer being spoken started
        self._agent_end = 0
        self._cleared = False

    # The timeline.

    def _now(self) -> int:
        """Where the session is now, in samples: the user's stream, or the clock while the client sends no audio."""
        return max(self._user_samples, round((self._clock() - self._t0) * self.rate))

    def _seconds(self, sample: int) -> float:
        return round(sample / self.rate, 3)

    # Events.

    def observe_input(self, event: object) -> None:
        if isinstance(event, AudioReceived):
            start = round((self._clock() - self._t0) * self.rate) - len(event.samples)
            if start < self._user_samples + PAUSE_S * self.rate:
                start = self._user_samples
            if self.record:
                self._user.add(start, event.samples)
            self._user_samples = start + len(event.samples)
        elif isinstance(event, SessionStarted):
            self.rate = event.sample_rate
            self._user_samples = round((self._clock() - self._t0) * self.rate)

    def observe_output(self, event: object) -> None:
        if isinstance(event, AgentAudio):
            start = max(self._agent_end, self._now())
            if self._answer_start is None:
                self._answer_start = start
            if self.record:
                self._agent.add(start, event.samples)
            self._agent_end = start + len(event.samples)
        elif isinstance(event, Clear):
            # The client drops what it had not played: so does the recording.
            now = self._now()
            if self.record:
                self._agent.cut(now)
            self._agent_end = min(self._agent_end, now)
            self._cleared = True
        elif isinstance(event, Transcript) and event.final:
            self._on_final(event)
        elif isinstance(event, Metrics):
            self._turns.append(dict(event.values))

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

    # The report.

    def report(self, end_reason: str = "") -> SessionReport:
        """The report so far; the WAV is rendered here, so call it off the event loop for a long session."""
        report = SessionReport(
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
        )
        if self.record:
            report.wav = self._wav()
        return report

    def _wav(self) -> bytes:
        length = max(self._user.end, self._agent.end)
        stereo = np.stack([self._user.render(length), self._agent.render(length)], axis=1)
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as wav:
            wav.setnchannels(2)
            wav.setsampwidth(2)
            wav.setframerate(self.rate)
            wav.writeframes(stereo.astype("<i2").tobytes())
        return buffer.getvalue()


# Delivery.

_deliveries: set[asyncio.Task] = set()


def deliver(report: SessionReport, directory: str = "", url: str = "") -> asyncio.Task | None:
    """Write and POST ``report`` in the background; returns the task (None when there is nowhere to send it)."""
    if not directory and not url:
        return None
    task = asyncio.create_task(_deliver(report, directory, url))
    _deliveries.add(task)
    task.add_done_callback(_deliveries.discard)
    return task


async def _deliver(report: SessionReport, directory: str, url: str) -> None:
    if directory:
        try:
            await asyncio.to_thread(write_report, report, Path(directory))
        except OSError:
            log.exception("session %s: writing the session report to %s failed", report.session_id, directory)
    if url:
        await post_report(report, url)


def write_report(report: SessionReport, directory: Path) -> Path:
    """Write ``SESSION.json`` (and ``SESSION.wav`` when recorded) into ``directory``; returns the JSON's path."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in report.session_id) or "session"
    if report.wav is not None:
        report.recording = f"{stem}.wav"
        (directory / report.recording).write_bytes(report.wav)
    path = directory / f"{stem}.json"
    path.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    return path


async def post_report(report: SessionReport, url: str, attempts: int = POST_ATTEMPTS) -> bool:
    """POST the report's JSON; a failure (connection, timeout, 5xx, 429) is retried with exponential backoff."""
    body = report.to_json()
    async with httpx.AsyncClient(timeout=10.0) as client:
        for attempt in range(attempts):
            try:
                response = await client.post(url, json=body)
                if response.status_code < 400:
                    return True
                if response.status_code < 500 and response.status_code != 429:
                    log.error(
                        "session %s: %s refused the report: HTTP %d", report.session_id, url, response.status_code
                    )
                    return False
                problem = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                problem = str(exc) or type(exc).__name__
            if attempt + 1 < attempts:
                delay = POST_BACKOFF_S * 2**attempt
                log.warning(
                    "session %s: posting the report failed (%s); retry in %.1f s", report.session_id, problem, delay
                )
                await asyncio.sleep(delay)
    log.error("session %s: the report could not be posted to %s after %d attempts", report.session_id, url, attempts)
    return False


async def wait_for_deliveries(timeout_s: float) -> None:
    """At shutdown: give reports still being written or posted a little time."""
    if _deliveries:
        await asyncio.wait(set(_deliveries), timeout=timeout_s)
