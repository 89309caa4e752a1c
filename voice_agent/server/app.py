"""HTTP and WebSocket routes.

``/ws`` speaks the native protocol, ``/v1/realtime`` the OpenAI Realtime protocol, ``/twilio`` and ``/telnyx`` speak Media
Streams for phone calls (``POST /twilio/voice`` answers a call with the TwiML
that connects it, see ``docs/telephony.md``), ``/`` serves the browser client
from ``voice_agent/web/``, ``/healthz`` and ``/readyz`` are the liveness and readiness probes
(``/readyz`` answers JSON, and 503 also when one more session would not fit: voice_agent/server/capacity.py).
``/metrics`` serves Prometheus metrics.
Models load in the background after start-up, so the probes answer at once;
if they fail to load, ``/healthz`` fails and the process is asked to exit.
WebSocket clients that arrive before the models are warm, past the session
limits, or during a shutdown are refused with close code 1013 (try again
later). A handshake from a browser origin not allowed gets HTTP 403, one
without the auth token HTTP 401 (see ``docs/operations.md``). With an auth
token, the telephony streams take only the telephony token (phone networks
cannot send ours), and are closed without one. A request naming a host this
server is not gets HTTP 403 (``host_check.py``), and a client address over its
handshake rate HTTP 429. The webhook adds a call token
to the stream URL it hands out (``/twilio[/TOKEN]/CALL_TOKEN``,
``call_tokens.py``): only a stream that carries one may have its call updated
through Twilio's REST API.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from .. import log as logs
from ..config import Settings
from ..engines.loader import Engines, load_engines
from ..protocols.call_tokens import CallTokens, looks_like_call_token
from ..protocols.events import InputEvent
from ..protocols.native import NativeProtocol
from ..protocols.realtime import RealtimeProtocol
from ..protocols.telephony import TELNYX, TWILIO, Dialect, MediaStreamsProtocol, is_call_sid
from .access import FORBIDDEN_HOST, UNAUTHORIZED, AccessPolicy, HostPolicy
from .capacity import RETRY_AFTER_S, CapacityModel, capacity_model
from .close_codes import CloseCode
from .connection import Codec, close_within, run_session
from .host_check import HostCheck
from .limits import AddressBudgets, Refused, SessionRegistry
from .metrics import CONTENT_TYPE, ServerMetrics
from .twiml import bare_host, connect_stream, is_valid_signature, stream_url

if TYPE_CHECKING:  # the agent modules load only when an agent is served
    from ..agent.agent import Agent
    from ..engines.interfaces import TTSBackend

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parents[1] / "web"  # package data: a wheel ships it (pyproject.toml)
MAX_WEBHOOK_BYTES = 64 * 1024
TOO_MANY_CONNECTIONS = "too_many_connections"
LOAD_SAMPLE_S = 1.0


class Runtime:
    """What the routes share: settings and, once loaded, the engines."""

    def __init__(self, settings: Settings, engines: Engines | None = None, agent: Agent | None = None):
        self.settings = settings
        self.engines = engines
        self.agent = agent
        self.agent_voice: TTSBackend | None = None
        self.ready = asyncio.Event()
        self.sessions = SessionRegistry(
            settings.max_sessions, settings.max_sessions_per_client, per_token=settings.max_sessions_per_telephony_token
        )
        # Keyed by a secret every gateway shares, so a call answered by one is streamed to any (call_tokens.py).
        self.call_tokens = CallTokens(settings.telephony_token or settings.twilio_auth_token)
        self.metrics = ServerMetrics()
        self.capacity: CapacityModel = capacity_model(settings)
        self.sessions.capacity = self.capacity
        self.metrics.on_voice_to_voice = self.capacity.observe_turn
        self.access = AccessPolicy(settings.auth_token, settings.allowed_origins)
        self.addresses = AddressBudgets(settings)
        self.hosts = HostPolicy((settings.host, bare_host(settings.public_host), *settings.allowed_hosts))
        self.load_failed = False
        # Called when the models cannot load: a server that can never be ready should exit, so that
        # an orchestrator restarts it rather than wait on it forever.
        self.on_load_failure: Callable[[], None] | None = None
        self.unwatch_engines: Callable[[], None] | None = None
        if engines is not None:
            self.unwatch_engines = self.metrics.watch_engines(engines)
            self.ready.set()

    async def load(self) -> None:
        try:
            self.engines = await asyncio.to_thread(load_engines, self.settings)
            self.unwatch_engines = self.metrics.watch_engines(self.engines)
            await self.engines.warm_up()
            if self.agent is not None:
                from ..agent.agent_session import prepare_agent

                self.agent_voice = await prepare_agent(self.agent, self.engines, self.settings)
        except Exception:
            log.exception("loading the models failed; the server cannot serve and stops")
            self.load_failed = True
            if self.on_load_failure is not None:
                self.on_load_failure()
            return
        self.ready.set()
        address = f"{self.settings.host}:{self.settings.port}"
        log.info("ready: ws://%s/ws, OpenAI Realtime clients at base_url http://%s/v1", address, address)

    async def watch_load(self) -> None:
        """Feed the capacity model this process's CPU time and live sessions until cancelled."""
        await self.ready.wait()  # loading the models is no idle cost
        while True:
            self.capacity.sample(time.process_time(), self.sessions.active)
            cost, sessions = self.capacity.session_cost, self.capacity.capacity()
            self.metrics.session_cost.set(cost or 0.0)
            self.metrics.capacity.set(-1 if sessions is None else sessions)
            await asyncio.sleep(LOAD_SAMPLE_S)

    @property
    def telephony_streams_open(self) -> bool:
        """Phone networks cannot send the auth token: with one set, streams need the telephony token."""
        return bool(self.settings.telephony_token) or not self.access.has_token

    @property
    def telephony_webhook_open(self) -> bool:
        """The webhook hands out the stream URL, and its token: only to requests Twilio signed, if there is one."""
        secret = self.settings.telephony_token or self.access.has_token
        return bool(self.settings.twilio_auth_token) or not secret

    def log_access(self) -> None:
        if not self.telephony_streams_open:
            log.warning("/twilio and /telnyx are closed: --auth-token is set and --telephony-token is not")
        if not self.telephony_webhook_open:
            log.warning("POST /twilio/voice is closed: set --twilio-auth-token so that only Twilio gets the stream URL")
        if self.settings.record and not self.settings.session_report_dir:
            log.warning("--record records nothing without --session-report-dir, where recordings are written")
        if self.access.has_token and not self.settings.public_metrics:
            log.info("/metrics asks for the auth token (--public-metrics opens it)")


def create_app(
    settings: Settings | None = None, engines: Engines | None = None, *, agent: Agent | None = None
) -> Starlette:
    """The server as a Starlette app: mount it in an existing app, or run it with any ASGI server.

    ``agent`` serves a :class:`~voice_agent.agent.agent.Agent` (else the one
    ``settings.agent`` names, else the plain assistant of ``settings.system_prompt``).
    """
    settings = settings or Settings.from_sources()
    if agent is None and (
        settings.agent or settings.session_report_dir or settings.session_report_url or settings.record
    ):
        from ..agent.agent import agent_from_settings

        agent = agent_from_settings(settings)
    if agent is not None and agent.voice and not settings.tts_voice:
        settings = dataclasses.replace(settings, tts_voice=agent.voice)
    runtime = Runtime(settings, engines, agent)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        runtime.log_access()
        loader = None if runtime.ready.is_set() else asyncio.create_task(runtime.load())
        lag_watch = asyncio.create_task(runtime.metrics.watch_event_loop())
        load_watch = asyncio.create_task(runtime.watch_load())
        yield
        lag_watch.cancel()
        load_watch.cancel()
        if runtime.unwatch_engines is not None:  # engines a caller passed in may outlive this app
            runtime.unwatch_engines()
        if loader is not None:
            loader.cancel()
        if runtime.agent is not None:
            from ..agent.report_delivery import wait_for_deliveries

            await wait_for_deliveries(5.0)
        if runtime.engines is not None and engines is None:
            await runtime.engines.close()

    async def allowed(websocket: WebSocket, check_token: bool) -> bool:
        """Refuse the handshake of a client the access policy does not let in (HTTP 401 or 403)."""
        refusal = runtime.access.refusal(websocket.headers, websocket.query_params, check_token)
        if refusal is None:
            return True
        runtime.metrics.refused.labels(refusal).inc()
        log.warning("refused a WebSocket from %s: %s", websocket.client, refusal)
        if refusal == UNAUTHORIZED:
            response = PlainTextResponse("missing or wrong token", status_code=401)
        else:
            response = PlainTextResponse("origin not allowed", status_code=403)
        await websocket.send_denial_response(response)
        return False

    async def within_handshake_rate(websocket: WebSocket) -> bool:
        """Refuse, with HTTP 429, a handshake past its client address's rate (``--max-connections-per-s``).

        Asked after the access checks: a handshake they refuse costs no session, and is not counted.
        """
        address = websocket.client.host if websocket.client else ""
        if runtime.addresses.admit_handshake(address):
            return True
        runtime.metrics.refused.labels(TOO_MANY_CONNECTIONS).inc()
        log.warning("refused a WebSocket from %s: too many connections from this address", websocket.client)
        response = PlainTextResponse("too many connections from this address", 429, headers={"Retry-After": "1"})
        await websocket.send_denial_response(response)
        return False

    async def serve(
        websocket: WebSocket,
        codec: Codec,
        per_address: bool = True,
        opening: Sequence[InputEvent] = (),
        telephony_token: str | None = None,
    ) -> None:
        """Run a session on an accepted WebSocket, if the server can take one now.

        ``per_address``: count it towards the client address's limit. A call that Twilio signed for does
        not: every call of a carrier may come from the same few addresses.
        ``opening``: what the codec tells the session before the client says anything.
        ``telephony_token``: a phone stream's token, counted towards its own limit.
        """
        engines = runtime.engines
        try:
            if not runtime.ready.is_set() or engines is None:
                raise Refused("loading", "models are still loading")
            address = (websocket.client.host if websocket.client else "") if per_address else None
            token_key = None if telephony_token is None else hashlib.sha256(telephony_token.encode()).hexdigest()
            slot = runtime.sessions.open(address, token_key)
        except Refused as refused:
            runtime.metrics.refused.labels(refused.kind).inc()
            log.warning("refused a session from %s: %s", websocket.client, refused)
            await close_within(websocket, CloseCode.TRY_AGAIN_LATER, str(refused))
            return
        with slot:
            await run_session(
                websocket,
                codec,
                engines,
                settings,
                slot,
                runtime.metrics,
                opening,
                agent=runtime.agent,
                agent_voice=runtime.agent_voice,
                byte_budget=runtime.addresses.bytes_of(address) if address is not None else None,
            )

    async def native(websocket: WebSocket) -> None:
        if not await allowed(websocket, check_token=True) or not await within_handshake_rate(websocket):
            return
        logs.start_session()  # after the handshake checks: refused ones log outside sessions, rate-limited
        await websocket.accept()
        await serve(websocket, NativeProtocol(allow_client_prompt=settings.allow_client_prompt))

    async def realtime(websocket: WebSocket) -> None:
        """The OpenAI Realtime protocol; ``?model=`` is reported back whatever it names, ``?metrics=1`` adds ours."""
        if not await allowed(websocket, check_token=True) or not await within_handshake_rate(websocket):
            return
        logs.start_session()  # after the handshake checks, as for /ws
        await websocket.accept()
        query = websocket.query_params
        codec = RealtimeProtocol(
            model=query.get("model", ""),
            metrics=query.get("metrics") in ("1", "true"),
            allow_client_prompt=settings.allow_client_prompt,
        )
        await serve(websocket, codec, opening=codec.opening())

    async def telephony(websocket: WebSocket, dialect: Dialect) -> None:
        # Phone networks cannot send our token: their streams carry telephony_token in the path instead.
        if not await allowed(websocket, check_token=False):
            return
        token = websocket.path_params.get("token", "")
        call_token = websocket.path_params.get("call")
        if call_token is None and not settings.telephony_token and dialect is TWILIO and looks_like_call_token(token):
            call_token, token = token, ""  # /twilio/CALL_TOKEN: the webhook's URL on a server without a token
        if not runtime.telephony_streams_open or (
            settings.telephony_token and not hmac.compare_digest(token.encode(), settings.telephony_token.encode())
        ):
            runtime.metrics.refused.labels(UNAUTHORIZED).inc()
            log.warning("refused a %s stream with a missing or wrong token from %s", dialect.name, websocket.client)
            await websocket.send_denial_response(PlainTextResponse("missing or wrong token", status_code=403))
            return
        call_sid = None
        if call_token is not None:
            call_sid = runtime.call_tokens.redeem(call_token)
            if call_sid is None:
                runtime.metrics.refused.labels("unknown_call").inc()
                log.warning("refused a %s stream with a forged, expired or used call token", dialect.name)
                response = PlainTextResponse("unknown, expired or used call token", status_code=403)
                await websocket.send_denial_response(response)
                return
        logs.start_session()
        await websocket.accept()
        codec = MediaStreamsProtocol(
            dialect,
            dtmf_template=settings.telephony_dtmf_template,
            greeting=settings.telephony_greeting,
            allow_client_prompt=settings.allow_client_prompt,
            call_id=call_sid,
        )
        # A call Twilio signed the webhook for is not counted per address: a carrier's calls share a few.
        signed_call = call_sid is not None and bool(settings.twilio_auth_token)
        await serve(websocket, codec, per_address=not signed_call, telephony_token=settings.telephony_token)

    async def twilio_stream(websocket: WebSocket) -> None:
        await telephony(websocket, TWILIO)

    async def telnyx_stream(websocket: WebSocket) -> None:
        await telephony(websocket, TELNYX)

    async def twilio_voice(request: Request) -> Response:
        """Twilio's voice webhook: answer the call by streaming it to ``/twilio``."""
        if not runtime.telephony_webhook_open:
            return PlainTextResponse("the webhook needs --twilio-auth-token on this server", status_code=403)
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > MAX_WEBHOOK_BYTES:
                return PlainTextResponse("request body too large", status_code=413)
        host = bare_host(settings.public_host) or request.headers.get("host", "")
        params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        if settings.twilio_auth_token:
            # Twilio signs the URL it was configured with; behind a proxy only the public host matches it.
            scheme = "https" if settings.public_host else request.headers.get("x-forwarded-proto", request.url.scheme)
            url = f"{scheme}://{host}{request.url.path}" + (f"?{request.url.query}" if request.url.query else "")
            if not is_valid_signature(
                settings.twilio_auth_token, url, params, request.headers.get("x-twilio-signature", "")
            ):
                log.warning(
                    "refused a Twilio webhook with a bad signature from %s (signed URL %s)", request.client, url
                )
                return PlainTextResponse("invalid X-Twilio-Signature", status_code=403)
        call_sid = dict(params).get("CallSid", "")
        if not is_call_sid(call_sid):
            return PlainTextResponse("CallSid must be CA and 32 hex digits", status_code=400)
        url = stream_url(host, "/twilio", settings.telephony_token, runtime.call_tokens.issue(call_sid))
        twiml = connect_stream(url)
        return Response(twiml, media_type="application/xml")

    async def healthz(request: Request) -> PlainTextResponse:
        if runtime.load_failed:
            return PlainTextResponse("the models failed to load", status_code=503)
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> JSONResponse:
        """Whether a balancer should send this server a new session: loaded, not draining, and room for one."""
        sessions = runtime.sessions
        if sessions.draining:
            return not_ready("shutting_down", "server is shutting down")
        if not runtime.ready.is_set():
            return not_ready("loading", "models are still loading")
        verdict = runtime.capacity.verdict(sessions.active)
        if verdict.reason is not None:
            return not_ready(verdict.reason, verdict.detail, verdict.as_json(), RETRY_AFTER_S)
        if sessions.maximum > 0 and sessions.active >= sessions.maximum:
            return not_ready("full", f"{sessions.active} sessions, the --max-sessions limit", verdict.as_json())
        return JSONResponse(verdict.as_json())

    def not_ready(reason: str, detail: str, figures: dict | None = None, retry_after_s: int = 0) -> JSONResponse:
        headers = {"Retry-After": str(retry_after_s)} if retry_after_s else None
        body = {**(figures or {}), "ready": False, "reason": reason, "detail": detail}
        return JSONResponse(body, status_code=503, headers=headers)

    async def metrics(request: Request) -> Response:
        if (
            runtime.access.has_token
            and not settings.public_metrics
            and not runtime.access.carries_token(request.headers, request.query_params)
        ):
            return PlainTextResponse("missing or wrong token", status_code=401)
        return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)

    routes = [
        WebSocketRoute("/ws", native),
        WebSocketRoute("/v1/realtime", realtime),
        WebSocketRoute("/twilio", twilio_stream),
        WebSocketRoute("/twilio/{token}", twilio_stream),
        WebSocketRoute("/twilio/{token}/{call}", twilio_stream),
        WebSocketRoute("/telnyx", telnyx_stream),
        WebSocketRoute("/telnyx/{token}", telnyx_stream),
        Route("/twilio/voice", twilio_voice, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
    ]
    if WEB_DIR.is_dir():
        routes.append(Mount("/", StaticFiles(directory=WEB_DIR, html=True)))
    host_check = Middleware(
        HostCheck, policy=runtime.hosts, on_refusal=lambda: runtime.metrics.refused.labels(FORBIDDEN_HOST).inc()
    )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[host_check])
    app.state.runtime = runtime
    return app
