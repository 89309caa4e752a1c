"""Run blocking iterators (llama.cpp, Piper) in worker threads, consumed as async iterators.

Heavy compute must stay off the event loop, yet these engines produce their
output piece by piece. The worker thread pushes each piece onto the loop as
soon as it exists, and stops between pieces once the consumer goes away:
closing or cancelling the async iterator is how a stage is aborted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Executor
from typing import TypeVar

from .wait_line import WaitLine

T = TypeVar("T")

_END = object()
_active = 0  # workers currently running, for tests and metrics
_active_lock = threading.Lock()


def active_workers() -> int:
    """How many :func:`iterate_in_thread` workers are running right now."""
    return _active


async def iterate_in_thread(
    produce: Callable[[], Iterator[T]],
    executor: Executor | None = None,
    ahead: int | None = None,
    line: WaitLine | None = None,
    kind: str = "",
) -> AsyncGenerator[T, None]:
    """Yield what ``produce()`` yields, computing it in ``executor``.

    When the consumer stops early, the worker stops before its next item and
    closes the iterator; the returned generator waits for that, so whatever
    the worker holds (a model instance) is free once this generator is closed.

    ``ahead`` bounds how many items the worker may compute before the consumer
    asks for them; past it the worker waits before computing the next one
    (0: only what was asked for). A consumer that stops pulling for a while
    thus stops the computation and frees its CPU cores.

    ``line``: where the work waits for a thread of ``executor``, counted until one takes it, as ``kind``.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    room = threading.Semaphore(ahead) if ahead is not None else None

    def wait_for_room() -> bool:
        """False once the consumer has gone away."""
        if room is None:
            return True
        while not room.acquire(timeout=0.05):
            if stop.is_set():
                return False
        return True

    def deliver(item: object, error: BaseException | None = None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (item, error))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            stop.set()

    def work() -> None:
        global _active
        if line is not None:
            line.leave(entered, kind)
        with _active_lock:
            _active += 1
        try:
            produce_all()
        finally:
            with _active_lock:
                _active -= 1

    def produce_all() -> None:
        iterator = produce()
        try:
            # Room first: the item is computed inside next(), and waiting after it would waste that work's cores.
            while not stop.is_set() and wait_for_room():
                item = next(iterator, _END)
                if item is _END or stop.is_set():
                    break
                deliver(item)
        except BaseException as exc:  # handed to the consumer, raised there
            deliver(_END, exc)
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        deliver(_END)

    entered = line.enter() if line is not None else 0.0
    worker = loop.run_in_executor(executor, work)
    try:
        while True:
            if room is not None:
                room.release()  # asks for one more item
            item, error = await queue.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        await outlast(worker)


async def outlast(work: asyncio.Future) -> None:
    """Wait until ``work`` (a thread's) is done, however often the waiting task is cancelled meanwhile; then
    raise the cancellation, if any.

    A thread cannot be stopped, and what it holds (a llama.cpp context) is not free until it returns:
    ``await asyncio.shield(work)`` alone returns at the second cancellation (a barge-in cancels an answer that
    is closing already), and a second thread then decodes on the same context: llama.cpp crashed the
    server with a segmentation fault (scripts/bargein_eval).
    """
    cancelled = False
    while not work.done():
        try:
            await asyncio.wait([work])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
