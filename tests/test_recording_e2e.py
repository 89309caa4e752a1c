"""A Realtime session's recording end to end: a real server with --record, the openai SDK as the client.

The recording must be at the session's own rate (24 kHz PCM here), as long as
the session's audio was, and labelled with the protocol it came in on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave

import numpy as np
import pytest

from tests.conftest import start_server, stop_server
from tests.realtimeclient import RealtimeClient
from tests.speech import silence, speech
from voice_agent.agent.session_report import PAUSE_S
from voice_agent.audio import float_to_pcm16

pytestmark = pytest.mark.e2e

RATE = 24000


@pytest.fixture(scope="module")
def recording_server(tmp_path_factory):
    reports = tmp_path_factory.mktemp("recordings")
    process, base_url, log_file = start_server(
        "--llm-temperature", "0", "--session-report-dir", str(reports), "--record"
    )
    yield base_url, reports
    stop_server(process, log_file)


async def test_a_realtime_sessions_recording_has_its_rate_length_and_protocol(recording_server):
    base_url, reports = recording_server
    connected = time.monotonic()
    client = await RealtimeClient.connect(base_url)
    await client.wait_for("session.created", timeout=10)
    await client.connection.session.update(
        session={
            "type": "realtime",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": {"type": "server_vad"}},
                "output": {"format": {"type": "audio/pcm", "rate": RATE}},
            },
        }
    )
    await client.wait_for("session.updated", timeout=10)
    question = np.concatenate([speech("What is the capital of France?", RATE), silence(0.3, RATE)])
    # The question goes in one append after a pause longer than it, as a client that buffered it while
    # its sending stalled: the recording places it to end on its arrival. Sent frame by frame, a stall of
    # this process or the server's on a loaded CPU would (rightly) put a gap inside it, and its length
    # would measure the stall, not the rate.
    await asyncio.sleep(len(question) / RATE + 2 * PAUSE_S)
    await client.connection.input_audio_buffer.append(audio=base64.b64encode(float_to_pcm16(question)).decode())
    await client.stream(silence(7.0, RATE), RATE)  # the answer plays while the line stays open
    sent_s = (len(question) + 7 * RATE) / RATE
    await client.wait_for("response.done", timeout=30)
    await client.close()
    closed = time.monotonic()

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not list(reports.glob("*.json")):
        await asyncio.sleep(0.2)
    [path] = reports.glob("*.json")
    report = json.loads(path.read_text())
    assert (report["protocol"], report["sample_rate"]) == ("realtime", RATE)
    assert any(e["role"] == "user" and "france" in e["text"].lower() for e in report["transcript"])
    with wave.open(str(reports / report["recording"])) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (RATE, 2, 2)
        audio = np.frombuffer(wav.readframes(wav.getnframes()), "<i2").reshape(-1, 2)
    length_s = len(audio) / RATE
    # The recording holds all the audio sent, at its real rate (not 24 kHz samples labelled 16 kHz: 1.5x too
    # long), and no more than the session lasted.
    assert sent_s <= length_s <= closed - connected + 0.5, (length_s, sent_s, closed - connected)
    user, agent = audio[:, 0], audio[:, 1]

    def loud_s(samples: np.ndarray) -> float:
        loud = np.flatnonzero(np.abs(samples) > 1000)
        return (loud[-1] - loud[0]) / RATE

    # The question lasts as long in the recording as it did when it was sent (at 16 kHz it would be 1.5x).
    spoken_s, question_s = loud_s(user), loud_s(speech("What is the capital of France?", RATE) * 32767)
    assert abs(spoken_s - question_s) < 0.1, (spoken_s, question_s)
    assert np.abs(agent).max() > 1000  # the answer is on the agent's channel
