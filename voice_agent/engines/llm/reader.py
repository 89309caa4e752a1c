"""A llama.cpp context kept for end-of-turn readings while every answer instance is busy.

The end-of-turn reading is one short prompt evaluation that decides how long a
turn's silence waits: without it a question waits the long silence. Under
load every answer instance may be streaming another session's answer, and the
decision must not change because of that (issue 38). So one more context on
the same memory-mapped weights takes the readings then, one at a time on its
own thread: they queue for it, and each takes tens of milliseconds.
It costs what an answer instance costs in memory (llama-cpp-python loads the
model once per context: about 150 MiB with SmolLM2), and no compute while idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..threads import outlast
from ..wait_line import WaitLine

T = TypeVar("T")


class Reader:
    def __init__(self, llama: Any, wait_line: WaitLine):
        self.llama = llama
        self.wait_line = wait_line  # its waits count as the LLM stage's, of kind "reading"
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="llm-reader")
        self._free: asyncio.Lock | None = None  # created lazily: it belongs to the serving loop

    async def read(self, evaluate: Callable[[Any, T], float | None], messages: T) -> float | None:
        """``evaluate(llama, messages)`` on this context, once the readings before it are done."""
        if self._free is None:
            self._free = asyncio.Lock()
        with self.wait_line.waiting("reading"):
            await self._free.acquire()
        try:
            work = asyncio.get_running_loop().run_in_executor(self._executor, evaluate, self.llama, messages)
            await outlast(work)  # an evaluation cannot be stopped: the context is free after it
        finally:
            self._free.release()
        return work.result()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
