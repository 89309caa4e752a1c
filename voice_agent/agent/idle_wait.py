"""The agent speaks again after the user's silence (a Realtime client's ``idle_timeout_ms``).

A conversation's policy, not turn taking: it watches only what the session
tells its client. An answer heard to its end starts the wait; a new user turn
or another answer ends it, as the Realtime API's speech start resets it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..protocols.events import CANCELLED, AgentState, OutputEvent, ResponseEnded, SpeechStarted


class IdleWait:
    def __init__(self, timeout_ms: Callable[[], int | None], idle: Callable[[], None]):
        self._timeout_ms, self._idle = timeout_ms, idle
        self._timer: asyncio.TimerHandle | None = None

    def see(self, event: OutputEvent) -> None:
        if isinstance(event, ResponseEnded) and event.status != CANCELLED and (timeout_ms := self._timeout_ms()):
            self.stop()
            self._timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._timed_out)
        elif isinstance(event, SpeechStarted) or (isinstance(event, AgentState) and event.state != "listening"):
            self.stop()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        self._idle()
