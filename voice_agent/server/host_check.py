"""ASGI middleware that refuses requests for a host this server is not (DNS rebinding), with HTTP 403.

The decision is :class:`~voice_agent.server.access.HostPolicy`'s. WebSocket
handshakes are refused before they are accepted, like the other access
checks. The probes are exempt: a load balancer or an orchestrator may call
them by any name, and they say nothing but the state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from ..printable import printable
from .access import HostPolicy

log = logging.getLogger(__name__)

PROBES = frozenset({"/healthz", "/readyz"})


class HostCheck:
    """``on_refusal`` is called once per refused request (a metric)."""

    def __init__(
        self,
        app: ASGIApp,
        policy: HostPolicy,
        exempt: Collection[str] = PROBES,
        on_refusal: Callable[[], None] = lambda: None,
    ):
        self.app = app
        self.policy = policy
        self.exempt = exempt
        self.on_refusal = on_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if self.policy.allows(host):
            await self.app(scope, receive, send)
            return
        self.on_refusal()
        log.warning("refused a request for host %s from %s", printable(host or ""), scope.get("client"))
        response = PlainTextResponse("host not allowed", status_code=403)
        if scope["type"] == "websocket":
            await WebSocket(scope, receive, send).send_denial_response(response)
        else:
            await response(scope, receive, send)
