"""Session report delivery, in the background: nothing here waits on a disk or a network on the audio path.

:func:`deliver` writes the report (``--session-report-dir``) and POSTs it as
JSON (``--session-report-url``, retried with backoff). Files are
created with mode 0600, and the directory is held to
``--session-report-max-files`` and ``--session-report-max-mb`` by deleting
the oldest reports. Posts go through one bounded queue and one HTTP client
per process; a report that finds the queue full is dropped, logged and
counted (``voice_agent_session_reports_dropped_total``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..log import log_exception
from .session_recording import DISK, create_private_file, file_stem
from .session_report import SessionReport

log = logging.getLogger(__name__)

POST_ATTEMPTS = 5
POST_BACKOFF_S = 0.5  # doubled after each failed attempt: 0.5, 1, 2, 4 s
POST_QUEUE = 100  # reports waiting to be posted; past it a report is dropped
POSTERS = 4  # reports posted at once
REPORT_FILE = re.compile(r"[A-Za-z0-9_-]+\.(?:json|wav)")  # the names this module gives its files


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
        DISK.submit(_write_and_trim, report, Path(directory), retention)
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
    stem = file_stem(report.session_id)
    path = directory / f"{stem}.json"
    partial = directory / f"{stem}.json.{uuid.uuid4().hex[:8]}.partial"
    with create_private_file(partial) as file:
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
    written = asyncio.wrap_future(DISK.submit(lambda: None))
    waits = [written]
    posting = _post if _post is not None and _post.loop is asyncio.get_running_loop() else None
    if posting is not None:
        waits.append(asyncio.ensure_future(posting.queue.join()))
    _, pending = await asyncio.wait(waits, timeout=timeout_s)
    for wait in pending:
        wait.cancel()
    if posting is not None:
        await posting.close()
