"""HTTP and WebSocket routes.

``/ws`` speaks the native protocol, ``/`` serves the browser client from
``web/``, ``/healthz`` and ``/readyz`` are the liveness and readiness probes.
Models load in the background after start-up, so the probes answer at once;
WebSocket clients that arrive before the models are warm are refused with
close code 1013 (try again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from .config import Settings
from .connection import run_session
from .engines import Engines, load_engines
from .protocols.native import NativeProtocol

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


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

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> PlainTextResponse:
        if runtime.ready.is_set():
            return PlainTextResponse("ready")
        return PlainTextResponse("loading", status_code=503)

    routes = [
        WebSocketRoute("/ws", native),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
    ]
    if WEB_DIR.is_dir():
        routes.append(Mount("/", StaticFiles(directory=WEB_DIR, html=True)))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.runtime = runtime
    return app
