"""iterate_in_thread: blocking iterators consumed as async iterators."""

from __future__ import annotations

import asyncio
import threading

from voice_agent.engines import threads
from voice_agent.engines.threads import iterate_in_thread


class Counting:
    """A blocking producer that counts the items it has computed."""

    def __init__(self, total: int = 50):
        self.total = total
        self.produced = 0
        self.lock = threading.Lock()

    def __call__(self):
        for i in range(self.total):
            with self.lock:
                self.produced += 1
            yield i


async def test_without_a_bound_the_worker_runs_ahead_of_a_slow_consumer():
    producer = Counting()
    items = iterate_in_thread(producer)
    assert await anext(items) == 0
    await asyncio.sleep(0.2)
    assert producer.produced == producer.total
    await items.aclose()


async def test_ahead_stops_the_computation_while_the_consumer_pauses():
    producer = Counting()
    items = iterate_in_thread(producer, ahead=2)
    assert await anext(items) == 0
    await asyncio.sleep(0.2)
    # The one asked for and two ahead; the worker waits before computing a fourth.
    assert producer.produced == 3
    assert [item async for item in items] == list(range(1, producer.total))


async def test_ahead_zero_computes_only_what_was_asked_for():
    producer = Counting()
    items = iterate_in_thread(producer, ahead=0)
    assert await anext(items) == 0
    await asyncio.sleep(0.2)
    assert producer.produced == 1
    assert await anext(items) == 1
    await items.aclose()
    assert producer.produced == 2


async def test_a_consumer_that_goes_away_frees_a_worker_waiting_for_room():
    producer = Counting()
    items = iterate_in_thread(producer, ahead=1)
    await anext(items)
    await asyncio.sleep(0.05)
    await items.aclose()
    assert threads.active_workers() == 0
    assert producer.produced < producer.total


async def test_a_consumer_cancelled_again_while_closing_still_waits_for_the_worker():
    # What the worker holds (a llama.cpp context) must be free once the consumer has gone, however often it
    # was cancelled: a second decode on the same context crashes the process.
    computing, release = threading.Event(), threading.Event()

    def produce():
        computing.set()
        release.wait(5)
        yield 1

    async def consume():
        async for _ in iterate_in_thread(produce):
            pass

    task = asyncio.create_task(consume())
    await asyncio.to_thread(computing.wait, 5)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting for the worker, which is inside next()
    release.set()
    await asyncio.wait([task])
    assert task.cancelled()
    assert threads.active_workers() == 0


async def test_outlast_waits_through_cancellations_and_then_raises_one():
    release = threading.Event()
    work = asyncio.get_running_loop().run_in_executor(None, release.wait, 5)
    waiting = asyncio.create_task(threads.outlast(work))
    for _ in range(3):
        await asyncio.sleep(0.02)
        waiting.cancel()
    await asyncio.sleep(0.02)
    assert not waiting.done()
    release.set()
    await asyncio.wait([waiting])
    assert work.done() and waiting.cancelled()
