"""Session reports: the transcript and recording on the session's timeline, tool calls, delivery to disk and URL."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from voice_agent.protocols.events import AgentAudio, AudioReceived, Clear, Metrics, SessionStarted, Transcript
from voice_agent.session_report import SessionRecorder, post_report, write_report
from voice_agent.tool_loop import ToolRecord

RATE = 8000
FRAME = RATE // 50


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read_wav(data: bytes) -> tuple[int, np.ndarray]:
    with wave.open(io.BytesIO(data)) as wav:
        assert wav.getnchannels() == 2 and wav.getsampwidth() == 2
        return wav.getframerate(), np.frombuffer(wav.readframes(wav.getnframes()), "<i2").reshape(-1, 2)


def test_transcript_and_recording_on_the_session_timeline():
    clock = Clock()
    recorder = SessionRecorder("s1", record=True, clock=clock)
    recorder.observe_input(SessionStarted(RATE, {}))
    # One second of user audio, sent at real time: loud from 0.5 s.
    for i in range(50):
        clock.now += 0.02
        level = 0.5 if i >= 25 else 0.0
        recorder.observe_input(AudioReceived(np.full(FRAME, level, np.float32)))
    recorder.observe_output(Transcript("user", "Book a table.", final=True))
    recorder.user_speech(0.5, 1.0)
    # The answer starts 0.42 s later; 0.5 s of audio is sent, paced at real time while the user is silent.
    for i in range(45):
        clock.now += 0.02
        if i >= 20:
            recorder.observe_output(AgentAudio(np.full(FRAME, -0.25, np.float32)))
        recorder.observe_input(AudioReceived(np.zeros(FRAME, np.float32)))
    recorder.observe_output(Transcript("agent", "Sure, for how many?", final=True))
    recorder.observe_output(Metrics({"turn": 1, "voice_to_voice_ms": 400.0}))
    # A second answer is interrupted after 0.2 s: the clear drops what was sent ahead.
    for i in range(20):
        clock.now += 0.02
        recorder.observe_output(AgentAudio(np.full(FRAME, -0.25, np.float32)))
        if i < 10:
            recorder.observe_output(AgentAudio(np.full(FRAME, -0.25, np.float32)))  # sent ahead
        recorder.observe_input(AudioReceived(np.zeros(FRAME, np.float32)))
    recorder.observe_output(Clear())
    recorder.observe_output(Transcript("agent", "We have", final=True))
    report = recorder.report("client closed")

    assert [(e.role, e.text, e.start_s, e.end_s, e.interrupted) for e in report.transcript] == [
        ("user", "Book a table.", 0.5, 1.0, False),
        ("agent", "Sure, for how many?", 1.42, 1.92, False),
        ("agent", "We have", 1.92, 2.3, True),
    ]
    assert report.turns == [{"turn": 1, "voice_to_voice_ms": 400.0}]
    assert report.sample_rate == RATE and report.end_reason == "client closed"
    rate, audio = read_wav(report.wav)
    assert rate == RATE
    user, agent = audio[:, 0], audio[:, 1]
    assert np.flatnonzero(user)[0] == int(0.5 * RATE) and np.flatnonzero(user)[-1] == RATE - 1
    loud_agent = np.flatnonzero(agent)
    assert loud_agent[0] == round(1.42 * RATE) and agent[loud_agent[0]] < 0
    assert loud_agent[-1] == int(2.3 * RATE) - 1  # nothing after the clear
    assert len(audio) == int(2.3 * RATE)
    json.dumps(report.to_json())


def test_a_text_only_session_uses_the_clock_and_records_nothing_unless_asked():
    clock = Clock()
    recorder = SessionRecorder("s2", clock=clock)
    clock.now += 2.0
    recorder.observe_output(Transcript("user", "Hi", final=True))
    clock.now += 0.3
    recorder.observe_output(AgentAudio(np.zeros(320, np.float32)))
    recorder.observe_output(Transcript("agent", "Hello.", final=True))
    report = recorder.report()
    assert [(e.start_s, e.end_s) for e in report.transcript] == [(2.0, 2.0), (2.3, 2.32)]
    assert report.wav is None


def test_tool_calls_are_reported_with_parsed_arguments():
    clock = Clock()
    recorder = SessionRecorder("s3", clock=clock)
    record = ToolRecord("c1", "book", '{"name": "Ann"}', started_at=101.5, result="ok", ok=True, duration_ms=12.34)
    recorder.tool_call(record)
    entry = recorder.report().tool_calls[0]
    assert (entry.name, entry.arguments, entry.start_s, entry.duration_ms) == ("book", {"name": "Ann"}, 1.5, 12.3)


def test_write_report(tmp_path):
    recorder = SessionRecorder("abc/../x", record=True)
    recorder.observe_input(AudioReceived(np.zeros(160, np.float32)))
    path = write_report(recorder.report(), tmp_path / "reports")
    data = json.loads(path.read_text())
    assert path.parent == tmp_path / "reports" and "/" not in path.name
    assert (path.parent / data["recording"]).exists() and "wav" not in data


async def test_posting_is_retried_with_backoff():
    received: list[dict] = []
    statuses = [503, 500, 200]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(statuses.pop(0))
            self.send_header("content-length", "0")
            self.end_headers()

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        report = SessionRecorder("s4").report()
        url = f"http://127.0.0.1:{http.server_address[1]}/reports"
        started = asyncio.get_running_loop().time()
        assert await post_report(report, url)
        assert len(received) == 3 and received[0]["session_id"] == "s4"
        assert asyncio.get_running_loop().time() - started >= 1.5  # 0.5 s, then 1 s
        statuses[:] = [400]
        assert not await post_report(report, url)  # a client error is not retried
        assert len(received) == 4
    finally:
        http.shutdown()
        http.server_close()
