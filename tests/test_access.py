"""Access control: the auth token and the allowed origins, unit and against a real server; no secret in the logs."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from tests.conftest import start_server, stop_server
from voice_agent.access import FORBIDDEN_ORIGIN, UNAUTHORIZED, AccessPolicy

TOKEN = "tok-3f9c2a7e-secret"
TELEPHONY_TOKEN = "phone-7d41b0-secret"
GOOD_ORIGIN = "https://app.example.com"


def test_no_token_and_no_origins_let_everyone_in():
    policy = AccessPolicy()
    assert policy.refusal({"origin": "https://evil.example"}, {}) is None
    assert policy.refusal({}, {}) is None


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
