"""Graceful shutdown: uvicorn's server, with a drain before its own shutdown.

uvicorn, on SIGTERM, closes every WebSocket at once with 1012. A voice agent
should rather let each caller hear the end of the answer being spoken. So the
first SIGTERM (or Ctrl-C) here stops listening, lets every session finish its
current answer within the grace period, closes it with 1001 (going away),
and only then hands over to uvicorn's shutdown, which finds nothing left to
close. The process exits 0. A second signal skips the wait: uvicorn's own
handling, immediate.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
from types import FrameType

import uvicorn

from .limits import SessionRegistry

log = logging.getLogger(__name__)


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, sessions: SessionRegistry, grace_s: float):
        super().__init__(config)
        self._sessions = sessions
        self._grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self._drain: asyncio.Task | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def stop_now(self) -> None:
        """Stop without a drain: for a server that never became ready, so has no session to wait for."""
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self._loop is None or sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)
            return
        # A signal handler runs between two bytecodes of the loop's thread: schedule, never await, here,
        # and in a fresh context, not that of whichever session the signal interrupted.
        self._loop.call_soon_threadsafe(self._start_drain, context=contextvars.Context())
        self._draining = True

    async def _stop_listening(self) -> None:
        """Close the listening sockets without stranding a connection accepted in the same instant.

        asyncio accepts a connection in one step and attaches it to its server in the next; one whose server
        closed in between is never served nor closed (Python 3.11's ``Server._attach`` asserts, and the error
        is dropped outside debug mode): its handshake hung until the process exited, and a balancer could
        not send it elsewhere. So: stop accepting, let what was accepted attach, then close. Connections
        still queued in the kernel are reset, which a balancer retries on another server.
        """
        servers = getattr(self, "servers", [])
        loop = asyncio.get_running_loop()
        for server in servers:
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())
        await asyncio.sleep(0)
        for server in servers:
            server.close()  # uvicorn's own shutdown closes them again, harmlessly

    def _start_drain(self) -> None:
        self._drain = asyncio.create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        log.info(
            "shutting down: %d live session(s) get %.0f s to finish their answer", self._sessions.active, self._grace_s
        )
        await self._stop_listening()
        try:
            await self._sessions.drain(self._grace_s)
        finally:
            log.info("sessions drained; stopping")
            self.should_exit = True
