"""Access control: the auth token, the allowed origins and hosts, unit and against a real server; no secret in the logs."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse

from tests.conftest import start_server, stop_server
from voice_agent.server.access import FORBIDDEN_ORIGIN, UNAUTHORIZED, AccessPolicy, HostPolicy
from voice_agent.server.host_check import HostCheck

TOKEN = "tok-3f9c2a7e-secret"
TELEPHONY_TOKEN = "phone-7d41b0-secret"
GOOD_ORIGIN = "https://app.example.com"


def test_no_token_lets_any_non_browser_and_any_same_origin_page_in():
    policy = AccessPolicy()
    assert policy.refusal({}, {}) is None
    assert policy.refusal({"origin": "http://agent.example:8000", "host": "agent.example:8000"}, {}) is None
    assert policy.refusal({"origin": "HTTPS://Agent.Example", "host": "agent.example"}, {}) is None


def test_cross_origin_browsers_are_refused_by_default_and_let_in_by_the_list_or_a_star():
    cross = {"origin": "https://evil.example", "host": "agent.example"}
    assert AccessPolicy().refusal(cross, {}) == FORBIDDEN_ORIGIN
    assert AccessPolicy().refusal({"origin": "http://agent.example:8001", "host": "agent.example:8000"}, {}) == (
        FORBIDDEN_ORIGIN
    )
    assert AccessPolicy().refusal({"origin": "null", "host": "agent.example"}, {}) == FORBIDDEN_ORIGIN
    assert AccessPolicy().refusal({"origin": "null"}, {}) == FORBIDDEN_ORIGIN  # no host: never "the same"
    assert AccessPolicy().refusal({"origin": "http://[::1", "host": "x"}, {}) == FORBIDDEN_ORIGIN
    assert AccessPolicy(allowed_origins=["https://evil.example"]).refusal(cross, {}) is None
    assert AccessPolicy(allowed_origins=["*"]).refusal(cross, {}) is None


def test_the_token_as_a_bearer_header_or_a_query_parameter():
    policy = AccessPolicy(token=TOKEN)
    assert policy.refusal({"authorization": f"Bearer {TOKEN}"}, {}) is None
    assert policy.refusal({"authorization": f"bearer   {TOKEN} "}, {}) is None
    assert policy.refusal({}, {"token": TOKEN}) is None
    assert policy.refusal({}, {}) == UNAUTHORIZED
    assert policy.refusal({"authorization": f"Bearer {TOKEN}x"}, {}) == UNAUTHORIZED
    assert policy.refusal({"authorization": f"Basic {TOKEN}"}, {}) == UNAUTHORIZED
    assert policy.refusal({}, {"token": TOKEN[:-1]}) == UNAUTHORIZED
    assert policy.refusal({}, {"token": "ünïcode"}) == UNAUTHORIZED  # never a TypeError from compare_digest
    assert policy.refusal({}, {}, check_token=False) is None


def test_origins_are_matched_without_case_or_trailing_slash_and_absent_origin_passes():
    policy = AccessPolicy(allowed_origins=[f" {GOOD_ORIGIN}/ ", "http://localhost:8000"])
    assert policy.refusal({"origin": "HTTPS://App.Example.com"}, {}) is None
    assert policy.refusal({"origin": "http://localhost:8000"}, {}) is None
    assert policy.refusal({"origin": "http://localhost:8001"}, {}) == FORBIDDEN_ORIGIN
    assert policy.refusal({"origin": "null"}, {}) == FORBIDDEN_ORIGIN
    assert policy.refusal({}, {}) is None  # not a browser: the token's business
    assert AccessPolicy(allowed_origins=["*"]).refusal({"origin": "https://any.example"}, {}) is None


def test_a_wrong_origin_is_refused_before_the_token_is_looked_at():
    policy = AccessPolicy(token=TOKEN, allowed_origins=[GOOD_ORIGIN])
    assert policy.refusal({"origin": "https://evil.example"}, {"token": TOKEN}) == FORBIDDEN_ORIGIN


@pytest.fixture(scope="module")
def guarded():
    process, base_url, log_file = start_server(
        "--allowed-origins", GOOD_ORIGIN,
        "--telephony-token", TELEPHONY_TOKEN,
        "--llm-max-tokens", "20",
        "--forwarded-allow-ips", "127.0.0.2",
        env={"VOICE_AGENT_AUTH_TOKEN": TOKEN},
    )  # fmt: skip
    yield base_url.replace("http://", "ws://"), log_file.name
    stop_server(process, log_file)


async def handshake_status(url: str, **kwargs) -> int | None:
    """The HTTP status of a refused handshake, or None when it was accepted (the connection answers)."""
    try:
        async with websockets.connect(url, **kwargs) as ws:
            await ws.send(json.dumps({"type": "text", "text": "Hi."}))
            message = json.loads(await asyncio.wait_for(ws.recv(), 15))
            assert message["type"] == "transcript"
            return None
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


@pytest.mark.e2e
async def test_the_server_asks_for_the_token_and_the_origin(guarded):
    base, _ = guarded
    assert await handshake_status(f"{base}/ws") == 401
    assert await handshake_status(f"{base}/ws?token=wrong") == 401
    assert await handshake_status(f"{base}/ws", additional_headers={"Authorization": "Bearer wrong"}) == 401
    assert await handshake_status(f"{base}/ws?token={TOKEN}") is None
    assert await handshake_status(f"{base}/ws", additional_headers={"Authorization": f"Bearer {TOKEN}"}) is None
    assert await handshake_status(f"{base}/ws?token={TOKEN}", origin="https://evil.example") == 403
    assert await handshake_status(f"{base}/ws?token={TOKEN}", origin=GOOD_ORIGIN) is None
    # Telephony streams keep their own token in the path, and the origin list applies to them too.
    assert await handshake_status(f"{base}/twilio/{TELEPHONY_TOKEN}", origin="https://evil.example") == 403


@pytest.mark.e2e
async def test_same_origin_pages_get_in_and_telephony_takes_only_its_path_token(guarded):
    base, _ = guarded
    port = base.rsplit(":", 1)[1]
    assert await handshake_status(f"{base}/ws?token={TOKEN}", origin=f"http://127.0.0.1:{port}") is None
    async with websockets.connect(f"{base}/twilio/{TELEPHONY_TOKEN}") as ws:
        await ws.send(json.dumps({"event": "connected"}))
    for path in ("/twilio", f"/twilio/{TOKEN}", "/telnyx/wrong"):
        assert await handshake_status(base + path) == 403


@pytest.mark.e2e
def test_the_webhook_does_not_hand_out_the_stream_token_without_a_signature_check(guarded):
    base, _ = guarded
    response = httpx.post(base.replace("ws://", "http://") + "/twilio/voice", data={"CallSid": "CA1"})
    assert response.status_code == 403 and TELEPHONY_TOKEN not in response.text


@pytest.mark.e2e
def test_metrics_ask_for_the_token(guarded):
    url = guarded[0].replace("ws://", "http://") + "/metrics"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.e2e
async def test_no_secret_reaches_the_log(guarded):
    base, log_path = guarded
    await handshake_status(f"{base}/ws?token={TOKEN}")
    await handshake_status(f"{base}/ws?token=a-wrong-guess")
    try:
        async with websockets.connect(f"{base}/twilio/{TELEPHONY_TOKEN}") as ws:
            await ws.close()
    except websockets.InvalidStatus:
        pass
    deadline = time.monotonic() + 5
    while "/twilio/***" not in (text := open(log_path).read()) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert "token=***" in text and "/twilio/***" in text  # the lines are there, redacted
    for secret in (TOKEN, TELEPHONY_TOKEN, "a-wrong-guess"):
        assert secret not in text


def test_hosts_allowed_are_localhost_ip_addresses_and_the_names_given():
    policy = HostPolicy(["0.0.0.0", "https://agent.example.com/", "Other.Example:8443"])
    for host in ("localhost:8000", "app.localhost", "127.0.0.1:8000", "[::1]:8000", "192.168.1.4", "[fe80::1]"):
        assert policy.allows(host), host
    for host in ("agent.example.com", "AGENT.example.com.:443", "other.example"):
        assert policy.allows(host), host
    assert policy.allows(None)  # HTTP/1.0 without a Host header: not a browser
    for host in ("attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io", "", "[::1", "a@127.0.0.1"):
        assert not policy.allows(host), host
    assert HostPolicy(["*"]).allows("attacker.example")
    assert HostPolicy(["agent.example.com"]).allows("agent.example.com:9999")  # ports are not compared


def test_the_host_check_refuses_rebound_names_and_lets_probes_through():
    refused = []

    async def hello(request):
        return PlainTextResponse("hello")

    async def echo(websocket):
        await websocket.accept()
        await websocket.send_text("open")
        await websocket.close()

    app = Starlette(
        routes=[Route("/healthz", hello), Route("/metrics", hello), WebSocketRoute("/ws", echo)],
        middleware=[
            Middleware(HostCheck, policy=HostPolicy(["agent.example.com"]), on_refusal=lambda: refused.append(1))
        ],
    )
    rebound = {"host": "attacker.example", "origin": "http://attacker.example"}
    with TestClient(app, base_url="http://agent.example.com") as client:
        assert client.get("/metrics").status_code == 200
        assert client.get("/metrics", headers=rebound).status_code == 403
        assert client.get("/healthz", headers=rebound).status_code == 200
        with client.websocket_connect("/ws", headers={"host": "agent.example.com"}) as ws:
            assert ws.receive_text() == "open"
        with pytest.raises(WebSocketDenialResponse) as denied:
            with client.websocket_connect("/ws", headers=rebound):
                pass
        assert denied.value.status_code == 403
    assert len(refused) == 2


@pytest.mark.e2e
async def test_x_forwarded_for_is_believed_only_from_the_proxies_listed(guarded):
    base, log_path = guarded
    port = int(base.rsplit(":", 1)[1])
    for source, claimed in (("127.0.0.2", "10.1.2.3"), ("127.0.0.3", "10.4.5.6")):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": claimed}
        async with websockets.connect(f"{base}/ws", sock=sock, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "mark", "name": "x"}))
    deadline = time.monotonic() + 5
    while "host='127.0.0.3'" not in (text := open(log_path).read()) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert "connected from Address(host='10.1.2.3'" in text  # from the listed proxy: its client's address
    assert "host='127.0.0.3'" in text and "10.4.5.6" not in text  # from anyone else: the peer's own
