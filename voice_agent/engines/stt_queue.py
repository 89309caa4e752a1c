"""Whisper's queue: every session's transcriptions, served in turn and within a budget.

Whisper runs on a few workers (``--stt-workers``) that all sessions share, and
a call cannot be interrupted. Without a queue in front of them, whoever asks
most often holds them: a client committing 150 ms of audio at a time queued 164
calls, and a bystander's question waited 17 s behind them. So:

- **At most one pending transcription of a kind.** A session's newer partial
  replaces one still waiting; a final transcript replaces its waiting partial;
  a client's commit while its previous commit still waits merges into it (one
  call reads both, :meth:`SessionSTT.committed`). A speculative final that more
  speech makes stale is cancelled by its turn, which takes it out of the queue.
- **A budget.** Each session has a bucket of Whisper worker-seconds, refilled
  at ``rate`` per second up to ``burst_s`` and charged each call's duration as
  it runs. Past it (an empty bucket), its partials are dropped and its other work waits
  until the bucket refills, so a session's sustained share of the workers is
  at most ``rate``. The defaults and why: ``config/stt.py``, ``--stt-budget``.
- **Fair order.** Among the jobs that may start, finals (final transcripts,
  commits, barge-in checks) come before partials; then a session with no call
  running before one that has one; then the session with the most budget left
  (the one that used least of its share lately); then the one served least
  recently; then the oldest job. A session that asks for more cannot queue
  ahead of one that asks for less: however much it has waiting, that one's
  next final starts before its next one does.
- **Partials give way.** A partial is dropped rather than queued when as many
  jobs wait as there are workers: it would be stale before it ran. And the
  partials of all sessions together hold at most ``partial_workers`` workers:
  one that would need more is dropped, so that with many sessions speaking the
  other workers stay free for finals, which a running call would delay (a call
  cannot be interrupted), and the cores for the stages after them.
- **Partials apart.** With a backend that runs partials on workers of their
  own, in the OS's background class (``transcribe_partial``, engines/priority.py),
  a running partial holds none of the finals' workers: starved of cores
  there, it would otherwise keep a final waiting. Nor is it charged to the
  session's budget: it runs on cores nothing else wanted, so it took no one's
  share, and its time on the clock, long when it is starved, says nothing of
  its cost (charged, one starved partial put a session seconds in debt, and
  its next final waited seconds for the refill).

:class:`STTScheduler` decides, without I/O and on an injected clock;
:class:`STTQueue` runs its decisions on the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..audio import PIPELINE_RATE
from .interfaces import Reading, STTBackend

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    PARTIAL = "partial"  # words so far, while the user speaks: may be dropped
    FINAL = "final"  # a turn's transcript (speculative at a pause, or at its commit), or a settled part of it
    COMMIT = "commit"  # a turn the client committed itself (turn_detection null)
    CHECK = "check"  # speech over the agent: does it interrupt?


@dataclass(eq=False)
class Job:
    session: Hashable
    kind: Kind
    audio: np.ndarray
    enqueued: float
    seq: int
    started: float | None = None


@dataclass
class _Account:
    level: float  # worker-seconds left in the bucket; below zero after a call longer than what was left
    updated: float
    running: list[Job] = field(default_factory=list)
    last_started: float = float("-inf")  # when its last call started: without a budget, the turns go round
    queued: list[Job] = field(default_factory=list)


@dataclass
class Submitted:
    job: Job | None  # None: dropped
    superseded: list[Job]  # waiting jobs this one replaced: they will never run
    reason: str = ""  # why it was dropped, or why those were superseded


class STTScheduler:
    """Which transcription runs next. Pure: the caller starts what :meth:`pop` hands out and reports its end."""

    def __init__(
        self,
        workers: int,
        rate: float,
        burst_s: float,
        clock: Callable[[], float] = time.monotonic,
        partial_workers: int | None = None,
        partials_apart: bool = False,
    ):
        self.workers = workers
        self.partial_workers = workers if partial_workers is None else max(1, min(partial_workers, workers))
        self.partials_apart = partials_apart  # partials run on workers of their own, not on these
        self.rate = rate
        self.burst_s = burst_s
        self._clock = clock
        self._accounts: dict[Hashable, _Account] = {}
        self._running = 0
        self._seq = itertools.count()

    def submit(self, session: Hashable, kind: Kind, audio: np.ndarray) -> Submitted:
        now = self._clock()
        account = self._account(session, now)
        queued_partials = [job for job in account.queued if job.kind is Kind.PARTIAL]
        if kind is Kind.PARTIAL:
            if self._left(account, now) <= 0:
                return Submitted(None, [], "over_budget")
            if self.waiting() - len(queued_partials) >= self.workers:
                return Submitted(None, [], "queue_deep")
            if self._partials(besides=account) >= self.partial_workers:
                return Submitted(None, [], "partials_busy")
        superseded = queued_partials
        if kind is Kind.COMMIT:
            earlier = [job for job in account.queued if job.kind is Kind.COMMIT]
            if earlier:
                audio = np.concatenate([*(job.audio for job in earlier), audio])
            superseded = superseded + earlier
        for job in superseded:
            account.queued.remove(job)
        job = Job(session, kind, audio, now, next(self._seq))
        account.queued.append(job)
        return Submitted(job, superseded, "merged" if kind is Kind.COMMIT and len(superseded) else "replaced")

    def pop(self) -> Job | None:
        """The job to start now, marked started; None when every worker is busy or nothing may start yet."""
        partials_running = sum(1 for a in self._accounts.values() for j in a.running if j.kind is Kind.PARTIAL)
        finals_full = self._running - (partials_running if self.partials_apart else 0) >= self.workers
        partials_full = partials_running >= self.partial_workers or (finals_full and not self.partials_apart)
        if finals_full and partials_full:
            return None
        now = self._clock()
        best: tuple[tuple, Job, _Account] | None = None
        for account in self._accounts.values():
            self._refill(account, now)
            left = self._left(account, now)
            for job in account.queued:
                if job.kind is not Kind.PARTIAL and left < 0:
                    continue  # over budget: waits for the bucket to refill
                if partials_full if job.kind is Kind.PARTIAL else finals_full:
                    continue
                key = (
                    job.kind is Kind.PARTIAL,
                    len(account.running) > 0,
                    -left,
                    account.last_started,
                    job.enqueued,
                    job.seq,
                )
                if best is None or key < best[0]:
                    best = (key, job, account)
        if best is None:
            return None
        _, job, account = best
        account.queued.remove(job)
        account.running.append(job)
        account.last_started = now
        self._running += 1
        job.started = now
        return job

    def finish(self, job: Job) -> float:
        """``job`` is done: charge its session the time it ran; returns that time."""
        assert job.started is not None, "finish() of a job that never started"
        now = self._clock()
        took = now - job.started
        self._running -= 1
        account = self._accounts.get(job.session)
        if account is not None:
            self._refill(account, now)
            if self._charged(job):
                account.level -= took
            account.running.remove(job)
        return took

    def _charged(self, job: Job) -> bool:
        """Whether ``job``'s time counts against its session's budget: not a partial on workers apart."""
        return not (self.partials_apart and job.kind is Kind.PARTIAL)

    def withdraw(self, job: Job) -> bool:
        """Take ``job`` out of the queue (nobody waits for it any more); False if it started already."""
        account = self._accounts.get(job.session)
        if account is None or job not in account.queued:
            return False
        account.queued.remove(job)
        return True

    def forget(self, session: Hashable) -> list[Job]:
        """``session`` is gone: its waiting jobs, taken out of the queue. A running one still ends with finish()."""
        account = self._accounts.pop(session, None)
        return [] if account is None else account.queued

    def wake_at(self) -> float | None:
        """When the first job held for its session's budget may start, if any waits so."""
        now = self._clock()
        times = []
        for account in self._accounts.values():
            self._refill(account, now)
            # With a charged call running, its end decides: it is charged then, and the queue looks again.
            charging = any(self._charged(job) for job in account.running)
            if account.level < 0 and not charging and any(j.kind is not Kind.PARTIAL for j in account.queued):
                times.append(now - account.level / self.rate)
        return min(times, default=None)

    def waiting(self, kind: Kind | None = None) -> int:
        """How many jobs wait (of ``kind``)."""
        return sum(1 for a in self._accounts.values() for j in a.queued if kind is None or j.kind is kind)

    def in_flight(self, *kinds: Kind) -> int:
        """How many jobs of ``kinds`` wait or run."""
        return sum(1 for a in self._accounts.values() for j in (*a.queued, *a.running) if j.kind in kinds)

    def _partials(self, besides: _Account) -> int:
        """Partials running or waiting, of every session but ``besides``'s."""
        return sum(
            1
            for account in self._accounts.values()
            if account is not besides
            for job in (*account.running, *account.queued)
            if job.kind is Kind.PARTIAL
        )

    def budget_left(self, session: Hashable) -> float:
        """``session``'s bucket, less what its running calls have taken so far."""
        now = self._clock()
        return self._left(self._account(session, now), now)

    def _account(self, session: Hashable, now: float) -> _Account:
        account = self._accounts.get(session)
        if account is None:
            account = self._accounts[session] = _Account(self.burst_s, now)
        self._refill(account, now)
        return account

    def _left(self, account: _Account, now: float) -> float:
        """The bucket less what the running calls took so far: they are charged as they run, so that a session
        cannot start more at once than its budget covers."""
        if self.rate <= 0:
            return account.level
        return account.level - sum(
            now - job.started for job in account.running if job.started is not None and self._charged(job)
        )

    def _refill(self, account: _Account, now: float) -> None:
        if self.rate <= 0:  # no budget: every session's bucket stays full
            account.level = self.burst_s
        else:
            account.level = min(self.burst_s, account.level + (now - account.updated) * self.rate)
        account.updated = now


class STTWatcher(Protocol):
    """Who is told what the queue does (the server's metrics)."""

    def stt_started(self, kind: Kind, waited_s: float) -> None: ...

    def stt_skipped(self, kind: Kind, reason: str) -> None: ...


class STTQueue:
    """The process's Whisper calls, through a :class:`STTScheduler`. ``backend`` is looked up at each call."""

    def __init__(
        self,
        backend: Callable[[], STTBackend],
        workers: int = 2,
        rate: float = 0.5,
        burst_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        partial_workers: int | None = None,
        partials_apart: bool = False,
    ):
        self._backend = backend
        self._scheduler = STTScheduler(workers, rate, burst_s, clock, partial_workers, partials_apart)
        self._clock = clock
        self._futures: dict[Job, asyncio.Future[Any]] = {}
        self._running: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None
        self.watchers: list[STTWatcher] = []

    def session(self, name: str = "") -> SessionSTT:
        """A new session's way in."""
        return SessionSTT(self, name)

    def depth(self) -> int:
        """Transcriptions waiting for a worker now."""
        return self._scheduler.waiting()

    def finals_in_flight(self) -> int:
        """Final transcripts (a turn's words, which its answer waits for) waiting or running now."""
        return self._scheduler.in_flight(Kind.FINAL, Kind.COMMIT)

    async def run(self, session: SessionSTT, kind: Kind, audio: np.ndarray) -> Any:
        """What the backend makes of ``audio`` (a Reading for a check, else the text); None if it never runs:
        dropped, or superseded by a later request of the session's."""
        submitted = self._scheduler.submit(session, kind, audio)
        for job in submitted.superseded:
            self._resolve(job, None)
            self._tell_skipped(job.kind, submitted.reason)
        if submitted.job is None:
            self._tell_skipped(kind, submitted.reason)
            return None
        job = submitted.job
        future = self._futures[job] = asyncio.get_running_loop().create_future()
        self._dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            if self._scheduler.withdraw(job):
                self._futures.pop(job, None)
                self._tell_skipped(kind, "cancelled")
            raise

    def forget(self, session: SessionSTT) -> None:
        for job in self._scheduler.forget(session):
            future = self._futures.pop(job, None)
            if future is not None and not future.done():
                future.cancel()

    async def close(self) -> None:
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()
        if self._timer is not None:
            self._timer.cancel()

    def _dispatch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while (job := self._scheduler.pop()) is not None:
            assert job.started is not None
            for watcher in self.watchers:
                watcher.stt_started(job.kind, job.started - job.enqueued)
            task = asyncio.create_task(self._work(job))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        wake = self._scheduler.wake_at()
        if wake is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(0.0, wake - self._clock()), self._dispatch)

    async def _work(self, job: Job) -> None:
        backend = self._backend()
        try:
            if job.kind is Kind.CHECK:
                result: Any = await backend.read(job.audio)
            elif job.kind is Kind.PARTIAL:
                result = await getattr(backend, "transcribe_partial", backend.transcribe)(job.audio)
            else:
                result = await backend.transcribe(job.audio)
        except Exception as exc:  # handed to whoever waits for it
            self._finish(job)
            future = self._futures.pop(job, None)
            if future is not None and not future.done():
                future.set_exception(exc)
            return
        self._finish(job)
        self._resolve(job, result)

    def _finish(self, job: Job) -> None:
        took = self._scheduler.finish(job)
        if isinstance(job.session, SessionSTT):
            job.session.calls += 1
            job.session.seconds += took
            job.session.audio_s += len(job.audio) / PIPELINE_RATE
            job.session.longest_s = max(job.session.longest_s, len(job.audio) / PIPELINE_RATE)
        self._dispatch()

    def _resolve(self, job: Job, result: Any) -> None:
        future = self._futures.pop(job, None)
        if future is not None and not future.done():
            future.set_result(result)

    def _tell_skipped(self, kind: Kind, reason: str) -> None:
        for watcher in self.watchers:
            watcher.stt_skipped(kind, reason)


class SessionSTT:
    """One session's transcriptions, through the process's :class:`STTQueue`."""

    def __init__(self, queue: STTQueue, name: str = ""):
        self._queue = queue
        self.name = name
        self.calls = 0  # Whisper calls made for this session
        self.seconds = 0.0  # and the worker-seconds they took
        self.audio_s = 0.0  # and the seconds of audio they read
        self.longest_s = 0.0  # in one call at most

    async def transcribe(self, audio: np.ndarray) -> str:
        """A final transcript (or a part of one): never dropped, though it may wait for the session's budget."""
        return await self._queue.run(self, Kind.FINAL, audio)

    async def read(self, audio: np.ndarray) -> Reading:
        """A barge-in check's reading, with Whisper's judgement of whether it is speech at all."""
        return await self._queue.run(self, Kind.CHECK, audio)

    async def partial(self, audio: np.ndarray) -> str | None:
        """Words so far; None when dropped (over budget, a deep queue, or replaced by a newer request)."""
        return await self._queue.run(self, Kind.PARTIAL, audio)

    async def committed(self, audio: np.ndarray) -> str | None:
        """A turn the client committed; None when a later commit came before this one started, and took its
        audio into its own transcription."""
        return await self._queue.run(self, Kind.COMMIT, audio)

    def close(self) -> None:
        """The session is over: what it still waits for never runs."""
        self._queue.forget(self)
        if self.calls:
            log.info(
                "session %s: %d Whisper calls, %.1f s, for %.1f s of audio (%.1f s at most at once)",
                self.name,
                self.calls,
                self.seconds,
                self.audio_s,
                self.longest_s,
            )
