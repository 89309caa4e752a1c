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

:func:`deliver` writes the report (``--session-report-dir``) and POSTs it as
JSON (``--session-report-url``, retried with backoff) in the background:
nothing here waits on a disk or a network on the audio path. Files are
created with mode 0600, and the directory is held to
``--session-report-max-files`` and ``--session-report-max-mb`` by deleting
the oldest reports. Posts go through one bounded queue and one HTTP client
per process; a report that finds the queue full is dropped, logged and
counted (``voice_agent_session_reports_dropped_total``).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import re
import time
import uuid
import wave
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import numpy as np

from ..audio import PIPELINE_RATE, float_to_int16, resample
from ..log import log_exception
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
from .tool_loop import ToolRecord

log = logging.getLogger(__name__)

# A client frame arriving this much after the end of the one before it starts
# where it arrived: the client paused sending. Smaller gaps are network jitter.
PAUSE_S = 0.2
# Recorded audio stays in memory this long behind the session's clock: a clear may still cut agent
# audio sent ahead, and a client that paused may send a late burst. Older audio is final.
HOLD_S = 5.0
WRITE_EVERY_S = 1.0  # final audio goes to the disk thread in pieces of about this length
POST_ATTEMPTS = 5
POST_BACKOFF_S = 0.5  # doubled after each failed attempt: 0.5, 1, 2, 4 s
POST_QUEUE = 100  # reports waiting to be posted; past it a report is dropped
POSTERS = 4  # reports posted at once
REPORT_FILE = re.compile(r"[A-Za-z0-9_-]+\.(?:json|wav)")  # the names this module gives its files
FILE_MODE = 0o600


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


# The disk: one thread for every session's files, so that writes keep their order and never block the loop.
_disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-reports")


def _create(path: Path) -> IO[bytes]:
    """A new file only this user can read, mode 0600 from the start (not chmod-ed after)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, FILE_MODE), "wb")


class _WavFile:
    """A stereo 16-bit WAV that grows as frames are appended; its header is fixed up when it is finished.

    Written as ``NAME.wav.ID.partial`` and renamed once finished, so a report never names a WAV
    still being written. Every method runs in the disk thread.
    """

    def __init__(self, directory: Path, stem: str, rate: int):
        self.directory = directory
        self.name = f"{stem}.wav"
        self.rate = rate
        self._partial = directory / f"{self.name}.{uuid.uuid4().hex[:8]}.partial"
        self._file: IO[bytes] | None = None
        self._wave: wave.Wave_write | None = None
        self.failed = False
        self.kept = False

    def append(self, frames: bytes) -> None:
        if self.failed:
            return
        try:
            if self._wave is None:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._file = _create(self._partial)
                self._wave = wave.open(self._file, "wb")
                self._wave.setnchannels(2)
                self._wave.setsampwidth(2)
                self._wave.setframerate(self.rate)
            # Raw: writeframes would seek back and patch the header on every call.
            self._wave.writeframesraw(frames)
        except OSError:
            log_exception(log, "writing the recording %s failed; the rest of it is dropped", self._partial)
            self.failed = True
            self._discard()

    def finish(self, keep: bool) -> None:
        if self._wave is None or self.failed:
            return
        try:
            self._wave.close()  # patches the header's sizes
            assert self._file is not None
            self._file.close()
            if keep:
                os.replace(self._partial, self.directory / self.name)
                self.kept = True
            else:
                self._partial.unlink()
        except OSError:
            log_exception(log, "finishing the recording %s failed", self._partial)
            self.failed = True
            self._discard()

    def _discard(self) -> None:
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        self._partial.unlink(missing_ok=True)


class _Track:
    """Mono audio placed at sample offsets, kept from the recording's write position on."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, np.ndarray]] = []
        self.end = 0

    def add(self, start: int, samples: np.ndarray, floor: int) -> None:
        """Place ``samples`` at ``start``; what would land before ``floor`` (written already) is dropped."""
        if start < floor:
            samples, start = samples[floor - start :], floor
        if len(samples):
            self.pieces.append((start, float_to_int16(samples)))
            self.end = max(self.end, start + len(samples))

    def cut(self, at: int) -> None:
        """Drop everything from sample ``at`` on."""
        self.pieces = [(start, samples[: at - start]) for start, samples in self.pieces if start < at]
        self.end = min(self.end, at)

    def take(self, start: int, end: int) -> np.ndarray:
        """Samples ``start`` to ``end`` (silence where nothing was placed), forgotten once taken."""
        out = np.zeros(end - start, dtype=np.int16)
        kept = []
        for at, samples in self.pieces:
            stop = at + len(samples)
            lo, hi = max(at, start), min(stop, end)
            if lo < hi:
                out[lo - start : hi - start] = samples[lo - at : hi - at]
            if stop > end:
                keep_from = max(at, end)
                kept.append((keep_from, samples[keep_from - at :]))
        self.pieces = kept
        return out


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
        self._user = _Track()
        self._agent = _Track()
        self._user_samples = 0  # where the user's stream is, in samples, even when not recording
        self._transcript: list[TranscriptEntry] = []
        self._tools: list[ToolCallEntry] = []
        self._turns: list[dict[str, Any]] = []
        self._answer_start: int | None = None  # where the agent answer being spoken started
        self._agent_end = 0
        self._cleared = False
        self._wav: _WavFile | None = None
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
            self._user, self._agent = _Track(), _Track()  # nothing more is kept
            log.warning("session %s: the recording reached its size limit and stops here", self.session_id)
        if self._wav is None:
            stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.session_id) or "session"
            self._wav = _WavFile(self.recording_dir, stem, self.rate)
        self._recorded_bytes += len(frames)
        self._written = end
        if frames:
            _disk.submit(self._wav.append, frames)

    def _finish_recording(self, keep: bool) -> None:
        """Write what is left and close the WAV: renamed into place if ``keep``, deleted if not."""
        if self.recording:
            self._write(max(self._user.end, self._agent.end, self._written))
        wav = self._wav
        self._finished = _disk.submit(wav.finish, keep) if wav is not None else _disk.submit(lambda: None)

    # The report.

    def finish(self, end_reason: str = "") -> SessionReport:
        """The session is over: its report, with the recording finished (or deleted, for an empty report).

        The WAV is finished in the disk thread; :func:`deliver` writes the JSON after it there.
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


# Delivery.


@dataclass(frozen=True)
class Retention:
    """How much the report directory may hold; the oldest reports go first. 0: no limit."""

    max_files: int = 0
    max_bytes: int = 0


def deliver(
    report: SessionReport,
    directory: str = "",
    url: str = "",
    retention: Retention = Retention(),
    recording: Future[None] | None = None,
) -> None:
    """Write ``report`` (after ``recording`` is finished) and queue it for posting, in the background."""
    if directory:
        _disk.submit(_write_and_trim, report, Path(directory), retention)
    if url:
        _posting().submit(report, url)


def _write_and_trim(report: SessionReport, directory: Path, retention: Retention) -> None:
    """In the disk thread, after the report's recording was finished (the thread keeps their order)."""
    if report.recording is not None and not (directory / report.recording).is_file():
        report.recording = None  # writing it failed; the log says why
    try:
        write_report(report, directory)
        enforce_retention(directory, retention)
    except OSError:
        log_exception(log, "session %s: writing the session report to %s failed", report.session_id, directory)


def write_report(report: SessionReport, directory: Path) -> Path:
    """Write ``SESSION.json`` into ``directory``, mode 0600; returns its path."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in report.session_id) or "session"
    path = directory / f"{stem}.json"
    partial = directory / f"{stem}.json.{uuid.uuid4().hex[:8]}.partial"
    with _create(partial) as file:
        file.write(json.dumps(report.to_json(), indent=2, ensure_ascii=False).encode())
    os.replace(partial, path)  # whole or not at all, for anyone reading the directory
    return path


def enforce_retention(directory: Path, retention: Retention) -> None:
    """Delete the oldest reports (JSON and WAV of one session together) until the directory is within bounds."""
    if not retention.max_files and not retention.max_bytes:
        return
    sessions: dict[str, list[tuple[Path, os.stat_result]]] = {}
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False) and REPORT_FILE.fullmatch(entry.name):
            sessions.setdefault(entry.name.rsplit(".", 1)[0], []).append((Path(entry.path), entry.stat()))
    files = sum(len(f) for f in sessions.values())
    size = sum(s.st_size for f in sessions.values() for _, s in f)
    oldest_first = sorted(sessions.values(), key=lambda f: max(s.st_mtime for _, s in f))
    for session in oldest_first:
        if (not retention.max_files or files <= retention.max_files) and (
            not retention.max_bytes or size <= retention.max_bytes
        ):
            break
        for path, stat in session:
            path.unlink(missing_ok=True)
            files -= 1
            size -= stat.st_size


class _Posting:
    """The process's report posts: a bounded queue, :data:`POSTERS` workers and one HTTP client."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[SessionReport, str]] = asyncio.Queue(POST_QUEUE)
        self.client = httpx.AsyncClient(timeout=10.0)
        self.dropped = 0
        self.workers = [asyncio.create_task(self._work()) for _ in range(POSTERS)]

    def submit(self, report: SessionReport, url: str) -> None:
        try:
            self.queue.put_nowait((report, url))
        except asyncio.QueueFull:
            self.dropped += 1
            _count_drop(report)

    async def _work(self) -> None:
        while True:
            report, url = await self.queue.get()
            try:
                await post_report(report, url, client=self.client)
            except Exception:
                log_exception(log, "session %s: posting the report failed", report.session_id)
            finally:
                self.queue.task_done()

    async def close(self) -> None:
        for worker in self.workers:
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)
        await self.client.aclose()


_post: _Posting | None = None
_dropped = 0


def _posting() -> _Posting:
    """The running loop's :class:`_Posting` (tests run one loop after another in one process)."""
    global _post
    if _post is None or _post.loop is not asyncio.get_running_loop():
        _post = _Posting()
    return _post


def _count_drop(report: SessionReport) -> None:
    global _dropped
    _dropped += 1
    if _dropped == 1 or _dropped % 100 == 0:
        log.warning(
            "session %s: the report queue is full (%d waiting); %d reports dropped so far",
            report.session_id,
            POST_QUEUE,
            _dropped,
        )


def reports_dropped() -> int:
    """Reports this process dropped because the post queue was full."""
    return _dropped


async def post_report(
    report: SessionReport, url: str, attempts: int = POST_ATTEMPTS, client: httpx.AsyncClient | None = None
) -> bool:
    """POST the report's JSON; a failure (connection, timeout, 5xx, 429) is retried with exponential backoff."""
    if client is None:
        async with httpx.AsyncClient(timeout=10.0) as own:
            return await post_report(report, url, attempts, own)
    body = report.to_json()
    for attempt in range(attempts):
        try:
            response = await client.post(url, json=body)
            if response.status_code < 400:
                return True
            if response.status_code < 500 and response.status_code != 429:
                log.error("session %s: %s refused the report: HTTP %d", report.session_id, url, response.status_code)
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
    """At shutdown: give reports still being written or posted a little time, then close the HTTP client."""
    written = asyncio.wrap_future(_disk.submit(lambda: None))
    waits = [written]
    posting = _post if _post is not None and _post.loop is asyncio.get_running_loop() else None
    if posting is not None:
        waits.append(asyncio.ensure_future(posting.queue.join()))
    _, pending = await asyncio.wait(waits, timeout=timeout_s)
    for wait in pending:
        wait.cancel()
    if posting is not None:
        await posting.close()
