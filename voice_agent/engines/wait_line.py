"""Work waiting for a stage's workers, counted for the metrics.

Whisper's calls go through their own scheduler (:mod:`.stt_queue`). The LLM's
answers wait for one of the llama.cpp instances, and Piper's syntheses for a
thread of its pool: each of those stages keeps a :class:`WaitLine`, which
knows how many wait now and tells its watchers (the server's metrics) how long
each waited once it starts. Under load these waits are where the time goes:
they say which stage is short of workers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol


class StageWatcher(Protocol):
    def stage_started(self, stage: str, kind: str, waited_s: float) -> None: ...


class WaitLine:
    """One stage's waiting work. Thread-safe: a pool's thread may say when its work starts."""

    def __init__(self, stage: str):
        self.stage = stage
        self.watchers: list[StageWatcher] = []
        self._waiting = 0
        self._lock = threading.Lock()

    def depth(self) -> int:
        """How many wait now."""
        return self._waiting

    def enter(self) -> float:
        """One more waits; returns when it began to."""
        with self._lock:
            self._waiting += 1
        return time.monotonic()

    def leave(self, entered: float, kind: str | None) -> None:
        """The work that :meth:`enter` returned ``entered`` for waits no more: it starts (a ``kind`` of the
        stage's), or it was given up (None), which is not a wait that ended in work."""
        with self._lock:
            self._waiting -= 1
        if kind is None:
            return
        waited = time.monotonic() - entered
        for watcher in list(self.watchers):
            watcher.stage_started(self.stage, kind, waited)

    @contextlib.contextmanager
    def waiting(self, kind: str) -> Iterator[None]:
        """Around a wait: it ends in work of ``kind`` unless it raises (a cancellation)."""
        entered = self.enter()
        started: str | None = None
        try:
            yield
            started = kind
        finally:
            self.leave(entered, started)
