"""Whisper's queue: one pending transcription of a kind per session, a budget, and a fair order across sessions."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voice_agent.engines.interfaces import Reading
from voice_agent.engines.stt_queue import Kind, STTQueue, STTScheduler, Submitted


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def samples(n: int) -> np.ndarray:
    return np.full(n, n, np.float32)


def scheduler(workers=1, rate=0.25, burst_s=15.0):
    clock = Clock()
    return STTScheduler(workers, rate, burst_s, clock), clock


def run(s: STTScheduler, clock: Clock, seconds: float):
    """Start the next job, let it run ``seconds``, finish it; returns it."""
    job = s.pop()
    assert job is not None
    clock.now += seconds
    s.finish(job)
    return job


@pytest.mark.parametrize("rate", [0.25, 0])
def test_a_session_that_asks_much_cannot_queue_ahead_of_another(rate):
    s, clock = scheduler(workers=1, rate=rate)
    attacker = [s.submit("attacker", Kind.CHECK, samples(i + 1)).job for i in range(20)]
    clock.now += 1
    bystander = s.submit("bystander", Kind.FINAL, samples(100)).job
    assert run(s, clock, 0.1) is attacker[0]
    # The attacker's next job is older, but the bystander used nothing lately (with a budget: has more of
    # it left; without: was served less recently): it goes first.
    s.submit("attacker", Kind.CHECK, samples(7))
    assert run(s, clock, 0.1) is bystander


def test_finals_come_before_partials_and_a_session_without_a_call_running_before_one_with_one():
    s, clock = scheduler(workers=2, rate=0)
    partial = s.submit("a", Kind.PARTIAL, samples(1)).job
    first = s.submit("b", Kind.FINAL, samples(2)).job
    second = s.submit("b", Kind.FINAL, samples(3)).job
    clock.now += 1
    other = s.submit("c", Kind.FINAL, samples(4)).job
    assert s.pop() is first  # the oldest final
    assert s.pop() is other  # not b's second: b has a call running
    assert s.pop() is None  # both workers busy
    s.finish(first)
    assert s.pop() is second and s.waiting() == 1 and s.waiting(Kind.PARTIAL) == 1
    s.finish(other)
    assert s.pop() is partial


def test_a_newer_partial_replaces_a_waiting_one_and_a_final_replaces_it_too():
    s, _ = scheduler(workers=1)
    s.submit("x", Kind.FINAL, samples(1))
    s.pop()  # the worker is busy
    old = s.submit("a", Kind.PARTIAL, samples(2)).job
    newer = s.submit("a", Kind.PARTIAL, samples(3))
    assert newer.superseded == [old] and s.waiting() == 1
    final = s.submit("a", Kind.FINAL, samples(4))
    assert final.superseded == [newer.job] and s.waiting(Kind.PARTIAL) == 0 and s.waiting() == 1


def test_commits_that_wait_merge_into_one_call_of_all_their_audio():
    s, clock = scheduler(workers=1, rate=0)
    first = s.submit("a", Kind.COMMIT, samples(3)).job
    assert run(s, clock, 0.5) is first  # started: it is not merged
    jobs = [s.submit("a", Kind.COMMIT, samples(n)) for n in (4, 5, 6)]
    assert jobs[1].superseded == [jobs[0].job] and jobs[2].superseded == [jobs[1].job]
    assert jobs[2].reason == "merged" and s.waiting() == 1
    merged = s.pop()
    assert merged is jobs[2].job
    assert merged.audio.tolist() == [4.0] * 4 + [5.0] * 5 + [6.0] * 6
    # Another session's commit is its own.
    assert s.submit("b", Kind.COMMIT, samples(2)).superseded == []


def test_past_its_budget_a_sessions_partials_are_dropped_and_its_finals_wait_for_the_refill():
    s, clock = scheduler(workers=2, rate=0.25, burst_s=1.0)
    s.submit("a", Kind.FINAL, samples(1))
    run(s, clock, 1.5)  # 1.5 s of Whisper from a full 1 s bucket: 0.5 s in debt
    assert s.budget_left("a") == pytest.approx(-0.5)
    dropped = s.submit("a", Kind.PARTIAL, samples(2))
    assert dropped.job is None and dropped.reason == "over_budget"
    held = s.submit("a", Kind.FINAL, samples(3)).job
    assert s.pop() is None  # the workers are free, but its bucket is empty
    other = s.submit("b", Kind.PARTIAL, samples(4)).job
    assert s.pop() is other  # another session's partial goes first: it is within its budget
    assert s.wake_at() == pytest.approx(clock.now + 0.5 / 0.25)
    clock.now = s.wake_at()
    assert s.pop() is held


def test_a_running_call_counts_against_the_budget_as_it_runs():
    s, clock = scheduler(workers=2, rate=0.25, burst_s=1.0)
    long = s.submit("a", Kind.FINAL, samples(1)).job
    assert s.pop() is long
    clock.now += 2.0  # still running, 2 s in: more than the bucket held
    s.submit("a", Kind.FINAL, samples(2))
    assert s.pop() is None and s.wake_at() is None  # its end, charged, decides when the next may start
    assert s.submit("a", Kind.PARTIAL, samples(3)).reason == "over_budget"
    other = s.submit("b", Kind.FINAL, samples(4)).job
    assert s.pop() is other


def test_without_a_budget_nothing_is_held():
    s, clock = scheduler(workers=1, rate=0, burst_s=1.0)
    s.submit("a", Kind.FINAL, samples(1))
    run(s, clock, 100)
    assert s.submit("a", Kind.PARTIAL, samples(1)).job is not None and s.wake_at() is None


def test_a_partial_is_dropped_when_as_many_jobs_wait_as_there_are_workers():
    s, _ = scheduler(workers=2, rate=0)
    for session in "ab":
        s.submit(session, Kind.FINAL, samples(1))
    assert s.pop() and s.pop()
    s.submit("c", Kind.FINAL, samples(1))
    assert s.submit("d", Kind.PARTIAL, samples(1)).job is not None  # one waits: room for a partial
    s.submit("e", Kind.FINAL, samples(1))
    deep = s.submit("f", Kind.PARTIAL, samples(1))
    assert deep.job is None and deep.reason == "queue_deep"


def test_the_partials_of_all_sessions_hold_at_most_their_workers_and_leave_the_rest_to_finals():
    s = STTScheduler(workers=2, rate=0, burst_s=1.0, clock=Clock(), partial_workers=1)
    first = s.submit("a", Kind.PARTIAL, samples(1)).job
    assert s.pop() is first
    busy = s.submit("b", Kind.PARTIAL, samples(2))
    assert busy.job is None and busy.reason == "partials_busy"
    final = s.submit("c", Kind.FINAL, samples(3)).job
    assert s.pop() is final  # the worker the partials leave free
    s.finish(final)
    newer = s.submit("a", Kind.PARTIAL, samples(4)).job  # a's own next one waits for a's running one
    assert newer is not None and s.pop() is None
    s.finish(first)
    assert s.pop() is newer
    assert s.submit("b", Kind.PARTIAL, samples(5)).reason == "partials_busy"
    s.finish(newer)
    assert s.submit("b", Kind.PARTIAL, samples(6)).job is not None


def test_one_session_s_partials_are_not_limited_by_the_partials_workers():
    s = STTScheduler(workers=2, rate=0, burst_s=1.0, clock=Clock(), partial_workers=1)
    for n in range(1, 6):  # a partial at a time, as the listener asks for them
        job = s.submit("a", Kind.PARTIAL, samples(n)).job
        assert job is not None and s.pop() is job
        s.finish(job)


def test_withdrawn_and_forgotten_jobs_never_start():
    s, clock = scheduler(workers=1, rate=0)
    running = s.submit("a", Kind.FINAL, samples(1)).job
    assert s.pop() is running and not s.withdraw(running)
    waiting = s.submit("a", Kind.FINAL, samples(2)).job
    assert s.withdraw(waiting) and s.waiting() == 0
    s.submit("b", Kind.FINAL, samples(3))
    assert len(s.forget("b")) == 1 and s.waiting() == 0
    clock.now += 1
    s.finish(running)
    assert s.pop() is None


# The queue on the event loop, with a fake Whisper.


class SlowSTT:
    """Stands in for Whisper: each call takes ``delay`` s; it records the audio lengths it read, in order."""

    def __init__(self, delay=0.05):
        self.delay = delay
        self.read_lengths: list[int] = []
        self.running = 0
        self.most_at_once = 0

    async def transcribe(self, audio):
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.running -= 1
        self.read_lengths.append(len(audio))
        return f"{len(audio)} samples"

    async def read(self, audio):
        return Reading(await self.transcribe(audio), no_speech=False)


async def test_the_queue_runs_at_most_workers_calls_and_merges_a_flood_of_commits():
    stt = SlowSTT()
    queue = STTQueue(lambda: stt, workers=2, rate=0)
    flooder, bystander = queue.session("flooder"), queue.session("bystander")
    commits = []
    for _ in range(50):
        commits.append(asyncio.create_task(flooder.committed(samples(100))))
        await asyncio.sleep(0.005)
    spoken = asyncio.create_task(bystander.transcribe(samples(7)))
    results = await asyncio.gather(*commits)
    assert await spoken == "7 samples"
    # 50 commits, a handful of calls: each reads what the commits while the last one ran brought.
    assert stt.most_at_once <= 2 and flooder.calls == len([r for r in results if r is not None]) < 15
    assert sum(int(r.split()[0]) for r in results if r is not None) == 50 * 100
    assert queue.depth() == 0


async def test_a_cancelled_request_leaves_the_queue_and_a_running_one_still_counts():
    stt = SlowSTT(delay=0.05)
    queue = STTQueue(lambda: stt, workers=1, rate=0)
    session = queue.session()
    running = asyncio.create_task(session.transcribe(samples(1)))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(session.transcribe(samples(2)))
    await asyncio.sleep(0.01)
    assert queue.depth() == 1
    running.cancel()
    waiting.cancel()
    await asyncio.gather(running, waiting, return_exceptions=True)
    assert queue.depth() == 0
    await asyncio.sleep(0.1)
    assert stt.read_lengths == [1] and session.calls == 1  # the started call ran to its end; the other never ran


async def test_a_session_held_by_its_budget_runs_once_the_bucket_refills():
    stt = SlowSTT(delay=0.1)
    queue = STTQueue(lambda: stt, workers=2, rate=1.0, burst_s=0.05)
    session = queue.session()
    await session.transcribe(samples(1))  # 0.1 s from a 0.05 s bucket: about 0.05 s in debt
    assert await session.partial(samples(2)) is None
    started = asyncio.get_running_loop().time()
    assert await session.transcribe(samples(3)) == "3 samples"
    assert asyncio.get_running_loop().time() - started >= 0.1 + 0.03  # waited for the refill, then ran


async def test_a_failed_call_reaches_its_caller_and_the_queue_goes_on():
    class Broken(SlowSTT):
        async def transcribe(self, audio):
            raise RuntimeError("no model")

    stt: SlowSTT = Broken()
    queue = STTQueue(lambda: stt, workers=1, rate=0)
    session = queue.session()
    with pytest.raises(RuntimeError):
        await session.transcribe(samples(1))
    stt = SlowSTT(delay=0)
    assert await session.transcribe(samples(2)) == "2 samples"


async def test_a_closed_session_s_waiting_requests_are_cancelled():
    stt = SlowSTT(delay=0.05)
    queue = STTQueue(lambda: stt, workers=1, rate=0)
    other, closing = queue.session(), queue.session()
    busy = asyncio.create_task(other.transcribe(samples(1)))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(closing.transcribe(samples(2)))
    await asyncio.sleep(0.01)
    closing.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await busy
    assert stt.read_lengths == [1]


@pytest.mark.parametrize("apart", [False, True])
def test_a_running_partial_holds_a_finals_worker_only_where_partials_share_them(apart):
    clock = Clock()
    s = STTScheduler(1, 0, 15.0, clock, partial_workers=1, partials_apart=apart)
    partial = s.submit("a", Kind.PARTIAL, samples(1)).job
    assert s.pop() is partial
    final = s.submit("b", Kind.FINAL, samples(2)).job
    # Apart, the partial runs on workers of its own (in the background class, where it may be starved of
    # cores for a while): the final starts now. Sharing, it waits for the partial's end.
    assert s.pop() is (final if apart else None)
    clock.now += 1
    s.finish(partial)
    if not apart:
        assert s.pop() is final


def test_partials_apart_are_still_held_to_their_own_workers():
    s = STTScheduler(2, 0, 15.0, Clock(), partial_workers=1, partials_apart=True)
    first = s.submit("a", Kind.PARTIAL, samples(1)).job
    assert s.pop() is first
    assert s.submit("b", Kind.PARTIAL, samples(2)) == Submitted(None, [], "partials_busy")
    finals = [s.submit(name, Kind.FINAL, samples(3)).job for name in ("b", "c")]
    assert [s.pop(), s.pop(), s.pop()] == [*finals, None]  # both finals' workers, and no third


class PartialsApartSTT(SlowSTT):
    """A backend whose partials have a way of their own."""

    def __init__(self):
        super().__init__(delay=0)
        self.partials: list[int] = []

    async def transcribe_partial(self, audio):
        self.partials.append(len(audio))
        return f"{len(audio)} samples so far"


async def test_the_queue_hands_partials_to_the_backends_own_way_for_them():
    stt = PartialsApartSTT()
    session = STTQueue(lambda: stt, workers=1, rate=0, partials_apart=True).session()
    assert await session.partial(samples(3)) == "3 samples so far"
    assert await session.transcribe(samples(4)) == "4 samples"
    assert stt.partials == [3] and stt.read_lengths == [4]


@pytest.mark.parametrize("apart", [False, True])
def test_a_partial_on_workers_apart_costs_its_session_no_budget_however_long_it_ran(apart):
    clock = Clock()
    s = STTScheduler(2, 0.5, 1.0, clock, partial_workers=1, partials_apart=apart)
    partial = s.submit("a", Kind.PARTIAL, samples(1)).job
    assert s.pop() is partial
    clock.now += 3  # starved of cores in the idle class: long on the clock, little work
    final = s.submit("a", Kind.FINAL, samples(2)).job
    # Apart, nothing is charged and the final starts; sharing the workers, the session's 1 s bucket owes 2 s
    # while the partial runs, and its final waits for the refill.
    assert s.pop() is (final if apart else None)
    s.finish(partial)
    assert s.budget_left("a") == pytest.approx(1.0 if apart else -2.0)
    if not apart:
        assert s.wake_at() == pytest.approx(clock.now + 4)  # 2 s owed at 0.5 a second


def test_a_session_in_debt_wakes_for_its_refill_while_only_a_partial_apart_runs():
    clock = Clock()
    s = STTScheduler(2, 0.5, 1.0, clock, partial_workers=1, partials_apart=True)
    partial = s.submit("a", Kind.PARTIAL, samples(1)).job
    assert s.pop() is partial
    s.submit("a", Kind.FINAL, samples(2))
    run(s, clock, 2.0)  # the final leaves 1 s owed; the partial goes on running
    final = s.submit("a", Kind.FINAL, samples(3)).job
    assert s.pop() is None  # in debt: the final waits for the refill...
    assert s.wake_at() == pytest.approx(clock.now + 2)  # ...which the running partial, never charged, does not delay
    clock.now += 2
    assert s.pop() is final
