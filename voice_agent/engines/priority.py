"""Background work on threads that the OS runs only on a core nothing else wants.

On a few cores, sessions' work that nobody waits for yet (a partial
transcript while the user still speaks) shares the CPU with work a user does
wait for (another session's final transcript, its answer's first tokens).
Our own queues decide what starts; once both run, the kernel decides who
gets the cores, and with equal weights it splits them evenly. Linux's
``SCHED_IDLE`` class is the kernel's own rule for the difference: a thread in
it gets a core only when no ordinary thread is ready to run. So background
work keeps the spare cycles, however many there are, without a share to tune,
and an ordinary thread never waits for it.

A thread's scheduling class is inherited by the threads it creates, so an
engine built in a background thread (CTranslate2 starts its worker threads,
and OpenMP its team, from there) computes in the background too.

Only code that runs without Python's GIL may compute there: a background
thread that holds the GIL when it loses its core (and, on a busy machine, it
may not get one back for a long while) stops every Python thread, the event
loop among them. CTranslate2's workers compute in C++ without it, so an engine
built here computes in the background, while the Python thread that calls it
stays ordinary, and waits for it without the GIL.

An unprivileged thread cannot leave ``SCHED_IDLE`` (``RLIMIT_NICE`` is 0 by
default), so work is never moved between classes: background work has threads
and engine copies of its own. Work that the critical path may come to wait for
must not run there: under load it would wait behind everything else.
Where the class does not exist (not Linux), the threads are ordinary ones.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


def enter_background() -> bool:
    """Put the calling thread (and the threads it starts from now on) in the background class; False where the
    OS has none."""
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is None:
        return False
    try:
        os.sched_setscheduler(0, idle, os.sched_param(0))  # 0: the calling thread, on Linux
    except OSError as exc:  # a container's seccomp profile may forbid it
        log.warning("background threads run at ordinary priority: %s", exc)
        return False
    return True


def in_background(build: Callable[[], T]) -> T:
    """``build()`` in a thread of the background class, so that the threads it starts (an engine's workers)
    are in it; returns what it returned, or raises what it raised."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        enter_background()
        try:
            result.append(build())
        except BaseException as exc:  # handed to the caller
            error.append(exc)

    thread = threading.Thread(target=run, name="background-build")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def in_background_class() -> bool:
    """Whether the calling thread is in the background class: for tests and logs."""
    idle = getattr(os, "SCHED_IDLE", None)
    return idle is not None and os.sched_getscheduler(0) == idle
