"""Background threads: what runs in them is in the OS's idle class, and so is every thread they start."""

from __future__ import annotations

import os
import threading

import pytest

from voice_agent.engines.priority import in_background, in_background_class

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this OS")


def test_what_is_built_in_the_background_starts_its_threads_there_and_the_caller_stays_ordinary():
    def build() -> dict[str, bool]:
        seen = {"builder": in_background_class()}

        def worker() -> None:  # as an engine's worker thread, started while it loads
            seen["worker"] = in_background_class()

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        return seen

    assert in_background(build) == {"builder": True, "worker": True}
    assert not in_background_class()


def test_a_failed_build_raises_in_the_caller():
    def build() -> None:
        raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        in_background(build)
