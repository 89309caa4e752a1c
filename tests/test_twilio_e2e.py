"""A simulated Twilio call end to end: real server process, real models, real WebSocket, 8 kHz μ-law."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import websockets

from tests.conftest import start_server, stop_server
from tests.speech import silence, speech
from tests.twilioclient import FRAME_S, TwilioClient
from voice_agent.server.twiml import signature

pytestmark = pytest.mark.e2e

RATE = 8000
TOKEN = "e2e-stream-token"
AUTH_TOKEN = "e2e-twilio-auth-token"
PUBLIC_HOST = "agent.example.test"
SID = "MZ" + "e2e0" * 8


@pytest.fixture(scope="module")
def phone_server():
    process, base_url, log_file = start_server(
        "--telephony-token",
        TOKEN,
        "--public-host",
        PUBLIC_HOST,
        "--allow-client-prompt",  # the greeting test sets the call's greeting
        env={"VOICE_AGENT_TWILIO_AUTH_TOKEN": AUTH_TOKEN},
    )
    yield base_url
    stop_server(process, log_file)


def post_voice_webhook(base_url: str, params: dict[str, str], signed_as: str | None) -> tuple[int, str]:
    body = urllib.parse.urlencode(params).encode()
    request = urllib.request.Request(base_url + "/twilio/voice", data=body, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if signed_as is not None:
        request.add_header("X-Twilio-Signature", signature(AUTH_TOKEN, signed_as, params.items()))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def local_stream_url(base_url: str, call_sid: str) -> str:
    """Answer a call like Twilio would, and point the stream URL from the TwiML at the local server."""
    params = {"CallSid": call_sid, "From": "+15550100", "To": "+15550199"}
    status, twiml = post_voice_webhook(base_url, params, f"https://{PUBLIC_HOST}/twilio/voice")
    assert status == 200, twiml
    url = ET.fromstring(twiml).find("./Connect/Stream").get("url")
    assert re.fullmatch(
        rf"wss://{PUBLIC_HOST}/twilio/{TOKEN}/{call_sid}\.[0-9]+\.[0-9a-f]{{16}}\.[0-9a-f]{{32}}", url
    ), url
    return url.replace(f"wss://{PUBLIC_HOST}", base_url.replace("http://", "ws://"))


def media_between(client: TwilioClient, start: float, end: float = float("inf")):
    return [r for r in client.of("media") if start <= r.at < end]


async def test_a_call_gets_a_spoken_answer_paced_and_marked_then_barge_in_clears(phone_server):
    question = "Tell me a long story about a brave knight and a dragon."
    interruption_audio = np.concatenate([speech("Stop, please wait a moment.", RATE), silence(3.0, RATE)])
    interruption_speech_s = len(speech("Stop, please wait a moment.", RATE)) / RATE
    call = "CA" + uuid.uuid4().hex
    client = await TwilioClient.connect(local_stream_url(phone_server, call), SID, call_sid=call)
    spoken_until = await client.stream(np.concatenate([speech(question, RATE), silence(0.3, RATE)]))
    line = asyncio.create_task(client.stream(silence(30.0, RATE)))  # a phone line never goes quiet
    first = await client.wait_for(lambda m: m.get("event") == "media", 20)
    assert first.at - spoken_until < 15.0  # latency is measured elsewhere; the CPU here is shared
    await asyncio.sleep(1.0)  # let the answer play a while
    line.cancel()

    answer = client.of("media")
    assert all(r.message["streamSid"] == SID and set(r.message) == {"event", "streamSid", "media"} for r in answer)
    audio = client.audio(answer)
    assert len(audio) == 160 * len(answer)  # every payload is 20 ms of 8 kHz μ-law
    assert np.sqrt(np.mean(audio**2)) > 0.01  # speech, not silence
    # Paced at real time with a small lead: never more than the lead ahead of the phone's playback.
    ahead = [r.at - answer[0].at - i * FRAME_S for i, r in enumerate(answer)]
    assert min(ahead) > -(0.2 + 0.3), f"audio ran {-min(ahead):.2f} s ahead of real time"
    # Barge-in: the caller talks over the answer.
    interruption = time.monotonic()
    talking = asyncio.create_task(client.stream(interruption_audio))
    clear = await client.wait_for(lambda m: m.get("event") == "clear", 5)
    assert clear.message == {"event": "clear", "streamSid": SID}
    assert clear.at - interruption < 2.0
    # The interrupted answer's audio stops at the clear; the answer to the interruption
    # can only start after the caller finished speaking.
    assert not media_between(client, clear.at, interruption + interruption_speech_s)
    await talking
    # Every spoken chunk, of the interrupted answer or of the next one, is followed by a mark.
    line = asyncio.create_task(client.stream(silence(30.0, RATE)))
    await client.wait_for(lambda m: m.get("event") == "mark", 20)
    marks = client.of("mark")
    assert all(
        m.message["streamSid"] == SID and m.message["mark"]["name"] and set(m.message) == {"event", "streamSid", "mark"}
        for m in marks
    )
    line.cancel()
    await client.close()


async def test_greeting_parameter_dtmf_and_garbage(phone_server):
    call = "CA" + uuid.uuid4().hex
    client = await TwilioClient.connect(
        local_stream_url(phone_server, call), SID, {"greeting": "Thanks for calling. How can I help?"}, call_sid=call
    )
    line = asyncio.create_task(client.stream(silence(30.0, RATE)))
    # The agent speaks first.
    await client.wait_for(lambda m: m.get("event") == "media", 10)
    for garbage in (
        "{nope",
        json.dumps({"event": "media", "sequenceNumber": "1", "streamSid": SID, "media": {"payload": "!!"}}),
        json.dumps({"event": "mystery"}),
        json.dumps({"event": "media", "sequenceNumber": "99999", "streamSid": "MZx"}),
        # What once ended a call with 1011: a huge integer, wrong types in mediaFormat, NaN, deep nesting.
        '{"event": "mark", "sequenceNumber": ' + "9" * 5000 + ', "streamSid": "' + SID + '"}',
        json.dumps(
            {"event": "start", "sequenceNumber": "2", "start": {"streamSid": "MZy", "mediaFormat": {"encoding": []}}}
        ),
        '{"event": "media", "sequenceNumber": NaN}',
        '{"event": ' + "[" * 20_000 + "]" * 20_000 + "}",
    ):
        await client.ws.send(garbage)
    mark = await client.wait_for(lambda m: m.get("event") == "mark", 15)  # the greeting's last chunk was sent
    assert mark.message == {"event": "mark", "streamSid": SID, "mark": {"name": mark.message["mark"]["name"]}}
    await asyncio.sleep(client.buffered_s() + 0.5)
    # A key press is text input: the agent answers it.
    pressed = time.monotonic()
    await client.ws.send(client.caller.dtmf("1"))
    deadline = pressed + 20
    while not media_between(client, pressed) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert media_between(client, pressed), "no spoken answer to the key press"
    assert client.ws.close_code is None
    line.cancel()
    await client.close()


def test_voice_webhook_needs_a_valid_signature(phone_server):
    params = {"CallSid": "CA" + "c" * 32, "From": "+15550100"}
    assert post_voice_webhook(phone_server, params, None)[0] == 403
    assert post_voice_webhook(phone_server, params, "https://evil.example/twilio/voice")[0] == 403
    status, twiml = post_voice_webhook(phone_server, params, f"https://{PUBLIC_HOST}/twilio/voice")
    assert status == 200
    assert re.fullmatch(
        rf'<\?xml version="1.0" encoding="UTF-8"\?><Response><Connect><Stream url="wss://{PUBLIC_HOST}/twilio/{TOKEN}/'
        rf'{params["CallSid"]}\.[0-9]+\.[0-9a-f]{{16}}\.[0-9a-f]{{32}}"/></Connect></Response>',
        twiml,
    )


@pytest.mark.parametrize("path", ["/twilio", "/twilio/wrong-token", "/telnyx"])
async def test_streams_without_the_token_are_refused_at_the_handshake(phone_server, path):
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(phone_server.replace("http://", "ws://") + path)
    assert refused.value.response.status_code == 403


async def test_a_stream_is_tied_to_the_call_the_webhook_answered(phone_server):
    call, other = "CA" + uuid.uuid4().hex, "CA" + uuid.uuid4().hex
    # A start for another call than the URL's is closed at once, with a reason.
    client = await TwilioClient.connect(local_stream_url(phone_server, call), SID, call_sid=other)
    await asyncio.wait_for(client._reader, 10)
    assert (client.ws.close_code, client.ws.close_reason) == (
        1008,
        "callSid is not the call this stream was issued for",
    )
    # The URL's call token opens one stream only, and an edited one none.
    url = local_stream_url(phone_server, other)
    base, _, call_token = url.rpartition("/")
    sid, expires, nonce, mac = call_token.split(".")
    for forged in (f"{base}/{call}.{expires}.{nonce}.{mac}", f"{base}/{sid}.{int(expires) + 60}.{nonce}.{mac}"):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(forged)
        assert refused.value.response.status_code == 403
    client = await TwilioClient.connect(url, SID, call_sid=other)
    await asyncio.sleep(1.0)
    assert client.ws.close_code is None
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url)
    assert refused.value.response.status_code == 403
    await client.close()
