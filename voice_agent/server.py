"""HTTP and WebSocket routes.

``/ws`` speaks the native protocol, ``/twilio`` and ``/telnyx`` speak Media
Streams for phone calls (``POST /twilio/voice`` answers a call with the TwiML
that connects it, see ``docs/telephony.md``), ``/`` serves the browser client
from ``web/``, ``/healthz`` and ``/readyz`` are the liveness and readiness probes.
Models load in the background after start-up, so the probes answer at once;
WebSocket clients that arrive before the models are warm are refused with
close code 1013 (try again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from pathlib import Path
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from .config import Settings
from .connection import run_session
from .engines import Engines, load_engines
from .protocols.native import NativeProtocol
from .protocols.twilio import TELNYX, TWILIO, Dialect, MediaStreamsProtocol
from .twiml import bare_host, connect_stream, is_valid_signature, stream_url

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
MAX_WEBHOOK_BYTES = 64 * 1024


class Runtime:
    """What the routes share: settings and, once loaded, the engines."""

    def __init__(self, settings: Settings, engines: Engines | None = None):
        self.settings = settings
        self.engines = engines
        self.ready = asyncio.Event()
        if engines is not None:
            self.ready.set()

    async def load(self) -> None:
        try:
            self.engines = await asyncio.to_thread(load_engines, self.settings)
            await self.engines.warm_up()
        except Exception:
            log.exception("loading the models failed")
            raise
        self.ready.set()
        log.info("ready: ws://%s:%d/ws", self.settings.host, self.settings.port)


def create_app(settings: Settings, engines: Engines | None = None) -> Starlette:
    runtime = Runtime(settings, engines)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        loader = None if runtime.ready.is_set() else asyncio.create_task(runtime.load())
        yield
        if loader is not None:
            loader.cancel()
        if runtime.engines is not None and engines is None:
            await runtime.engines.close()

    async def native(websocket: WebSocket) -> None:
        await websocket.accept()
        if not runtime.ready.is_set():
            await websocket.close(1013, "models are still loading")
            return
        await run_session(websocket, NativeProtocol(), runtime.engines, settings)

    async def telephony(websocket: WebSocket, dialect: Dialect) -> None:
        token = websocket.path_params.get("token", "")
        if settings.telephony_token and not hmac.compare_digest(token.encode(), settings.telephony_token.encode()):
            log.warning("refused a %s stream with a missing or wrong token from %s", dialect.name, websocket.client)
            await websocket.close(1008)  # before accept, so the handshake gets HTTP 403
            return
        await websocket.accept()
        if not runtime.ready.is_set():
            await websocket.close(1013, "models are still loading")
            return
        codec = MediaStreamsProtocol(
            dialect, dtmf_template=settings.telephony_dtmf_template, greeting=settings.telephony_greeting
        )
        await run_session(websocket, codec, runtime.engines, settings)

    async def twilio_stream(websocket: WebSocket) -> None:
        await telephony(websocket, TWILIO)

    async def telnyx_stream(websocket: WebSocket) -> None:
        await telephony(websocket, TELNYX)

    async def twilio_voice(request: Request) -> Response:
        """Twilio's voice webhook: answer the call by streaming it to ``/twilio``."""
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > MAX_WEBHOOK_BYTES:
                return PlainTextResponse("request body too large", status_code=413)
        host = bare_host(settings.public_host) or request.headers.get("host", "")
        if settings.twilio_auth_token:
            # Twilio signs the URL it was configured with; behind a proxy only the public host matches it.
            scheme = "https" if settings.public_host else request.headers.get("x-forwarded-proto", request.url.scheme)
            url = f"{scheme}://{host}{request.url.path}" + (f"?{request.url.query}" if request.url.query else "")
            params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
            if not is_valid_signature(settings.twilio_auth_token, url, params, request.headers.get("x-twilio-signature", "")):
                log.warning("refused a Twilio webhook with a bad signature from %s (signed URL %s)", request.client, url)
                return PlainTextResponse("invalid X-Twilio-Signature", status_code=403)
        twiml = connect_stream(stream_url(host, "/twilio", settings.telephony_token))
        return Response(twiml, media_type="application/xml")

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> PlainTextResponse:
        if runtime.ready.is_set():
            return PlainTextResponse("ready")
        return PlainTextResponse("loading", status_code=503)

    routes = [
        WebSocketRoute("/ws", native),
        WebSocketRoute("/twilio", twilio_stream),
        WebSocketRoute("/twilio/{token}", twilio_stream),
        WebSocketRoute("/telnyx", telnyx_stream),
        WebSocketRoute("/telnyx/{token}", telnyx_stream),
        Route("/twilio/voice", twilio_voice, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
    ]
    if WEB_DIR.is_dir():
        routes.append(Mount("/", StaticFiles(directory=WEB_DIR, html=True)))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.runtime = runtime
    return app
