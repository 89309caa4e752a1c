"""Session reports: the transcript and recording on the session's timeline, tool calls, delivery to disk and URL."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
import time
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from voice_agent.agent import report_delivery, session_recording, session_report
from voice_agent.agent.report_delivery import Retention, deliver, enforce_retention, post_report, write_report
from voice_agent.agent.session_report import HOLD_S, PAUSE_S, SessionRecorder, SessionReport
from voice_agent.agent.tool_loop import ToolRecord
from voice_agent.audio import float_to_int16
from voice_agent.protocols.events import (
    AgentAudio,
    AudioReceived,
    Clear,
    Metrics,
    SessionStarted,
    SessionUpdate,
    Transcript,
)
from voice_agent.server.metrics import ServerMetrics

RATE = 8000
FRAME = RATE // 50


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read_wav(path: Path) -> tuple[int, np.ndarray]:
    with wave.open(str(path)) as wav:
        assert wav.getnchannels() == 2 and wav.getsampwidth() == 2
        return wav.getframerate(), np.frombuffer(wav.readframes(wav.getnframes()), "<i2").reshape(-1, 2)


def settled() -> None:
    """Wait until the disk thread has done what it was given."""
    session_recording.DISK.submit(lambda: None).result(10)


def said(recorder: SessionRecorder, text: str = "Hello.") -> None:
    recorder.observe_output(Transcript("user", text, final=True))


def test_transcript_and_recording_on_the_session_timeline(tmp_path):
    clock = Clock()
    recorder = SessionRecorder("s1", "twilio", recording_dir=str(tmp_path), clock=clock)
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
    report = recorder.finish("client closed")

    assert [(e.role, e.text, e.start_s, e.end_s, e.interrupted) for e in report.transcript] == [
        ("user", "Book a table.", 0.5, 1.0, False),
        ("agent", "Sure, for how many?", 1.42, 1.92, False),
        ("agent", "We have", 1.92, 2.3, True),
    ]
    assert report.turns == [{"turn": 1, "voice_to_voice_ms": 400.0}]
    assert report.sample_rate == RATE and report.end_reason == "client closed" and report.protocol == "twilio"
    assert report.recording == "s1.wav" and not report.recording_truncated
    settled()
    rate, audio = read_wav(tmp_path / "s1.wav")
    assert rate == RATE
    user, agent = audio[:, 0], audio[:, 1]
    assert np.flatnonzero(user)[0] == int(0.5 * RATE) and np.flatnonzero(user)[-1] == RATE - 1
    loud_agent = np.flatnonzero(agent)
    assert loud_agent[0] == round(1.42 * RATE) and agent[loud_agent[0]] < 0
    assert loud_agent[-1] == int(2.3 * RATE) - 1  # nothing after the clear
    assert len(audio) == int(2.3 * RATE)
    json.dumps(report.to_json())


def test_a_text_only_session_uses_the_clock_and_records_nothing_unless_asked(tmp_path):
    clock = Clock()
    recorder = SessionRecorder("s2", "ws", clock=clock)
    clock.now += 2.0
    recorder.observe_output(Transcript("user", "Hi", final=True))
    clock.now += 0.3
    recorder.observe_output(AgentAudio(np.zeros(320, np.float32)))
    recorder.observe_output(Transcript("agent", "Hello.", final=True))
    report = recorder.finish()
    assert [(e.start_s, e.end_s) for e in report.transcript] == [(2.0, 2.0), (2.3, 2.32)]
    assert report.recording is None


def test_tool_calls_are_reported_with_parsed_arguments():
    clock = Clock()
    recorder = SessionRecorder("s3", "ws", clock=clock)
    record = ToolRecord("c1", "book", '{"name": "Ann"}', started_at=101.5, result="ok", ok=True, duration_ms=12.34)
    recorder.tool_call(record)
    entry = recorder.report().tool_calls[0]
    assert (entry.name, entry.arguments, entry.start_s, entry.duration_ms) == ("book", {"name": "Ann"}, 1.5, 12.3)


def test_write_report_makes_a_0600_file_with_a_safe_name(tmp_path):
    os.umask(0o022)
    recorder = SessionRecorder("abc/../x", "ws")
    said(recorder)
    path = write_report(recorder.finish(), tmp_path / "reports")
    data = json.loads(path.read_text())
    assert path.parent == tmp_path / "reports" and "/" not in path.name and data["session_id"] == "abc/../x"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left


async def test_the_recording_and_the_report_are_0600_and_written_in_order(tmp_path):
    recorder = SessionRecorder("s5", "ws", recording_dir=str(tmp_path))
    recorder.observe_input(SessionStarted(RATE, {}))
    recorder.observe_input(AudioReceived(np.full(RATE, 0.1, np.float32)))
    said(recorder)
    deliver(recorder.finish(), str(tmp_path))
    settled()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s5.json", "s5.wav"]
    assert {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {0o600}
    assert json.loads((tmp_path / "s5.json").read_text())["recording"] == "s5.wav"


async def test_an_empty_session_leaves_nothing(tmp_path):
    """Audio, but nobody said anything: the recording is deleted and there is no report."""
    clock = Clock()
    recorder = SessionRecorder("s6", "ws", recording_dir=str(tmp_path), clock=clock)
    recorder.observe_input(SessionStarted(RATE, {}))
    for _ in range(500):  # 10 s: more than HOLD_S, so some of it went to disk already
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(FRAME, 0.01, np.float32)))
    recorder.observe_output(Transcript("agent", "Hello, how can I help?", final=True))  # the greeting
    settled()
    assert list(tmp_path.iterdir())  # the recording was being written
    report = recorder.finish()
    assert report.empty
    settled()
    assert not list(tmp_path.iterdir())


def test_what_makes_a_report_worth_keeping():
    def report(**fields) -> SessionReport:
        return SessionReport("s", "2026-01-01T00:00:00.000+00:00", 1.0, "ws", **fields)

    assert report().empty
    assert report(transcript=[session_report.TranscriptEntry("agent", "Hi, I am the bot.", 0, 1)]).empty
    assert not report(transcript=[session_report.TranscriptEntry("user", "hi", 0, 1)]).empty
    assert not report(turns=[{"turn": 1}]).empty


def test_the_recording_streams_to_disk_and_holds_only_seconds_in_memory(tmp_path):
    clock = Clock()
    recorder = SessionRecorder("s7", "ws", recording_dir=str(tmp_path), clock=clock)
    recorder.observe_input(SessionStarted(RATE, {}))
    for i in range(60 * 50):  # a minute of audio, with an answer sent ahead every 10 s
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(FRAME, 0.1, np.float32)))
        if i % 500 == 0:
            recorder.observe_output(AgentAudio(np.full(RATE * 2, -0.1, np.float32)))
        held = sum(len(s) for track in (recorder._user, recorder._agent) for _, s in track.pieces)
        assert held <= (HOLD_S + 1.0 + 2.0) * RATE * 2
    settled()
    [partial] = tmp_path.iterdir()
    assert partial.name.startswith("s7.wav.") and partial.stat().st_size > 50 * RATE * 4
    said(recorder)
    recorder.finish()
    settled()
    rate, audio = read_wav(tmp_path / "s7.wav")
    assert rate == RATE and len(audio) == 60 * RATE
    assert (audio[:, 0] > 0).all() and (audio[:, 1] < 0).sum() == 6 * 2 * RATE


def test_a_recording_stops_at_its_size_cap(tmp_path):
    clock = Clock()
    cap = 4 * RATE * 3  # three seconds of stereo 16-bit
    recorder = SessionRecorder("s8", "ws", recording_dir=str(tmp_path), max_recording_bytes=cap, clock=clock)
    recorder.observe_input(SessionStarted(RATE, {}))
    for _ in range(20 * 50):
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(FRAME, 0.1, np.float32)))
    said(recorder)
    report = recorder.finish()
    settled()
    assert report.recording_truncated
    _, audio = read_wav(tmp_path / "s8.wav")
    assert len(audio) == 3 * RATE


def test_user_audio_is_placed_by_arrival_a_stall_leaves_a_gap_and_jitter_does_not(tmp_path):
    """What the agent heard: frames late by less than PAUSE_S follow on; after a longer stall the burst that
    catches up starts where it arrived, and one append of buffered audio ends where it arrived."""
    clock = Clock()
    recorder = SessionRecorder("s11", "ws", recording_dir=str(tmp_path), clock=clock)
    recorder.observe_input(SessionStarted(RATE, {}))

    def frames(count: int, level: float) -> None:
        for _ in range(count):
            recorder.observe_input(AudioReceived(np.full(FRAME, level, np.float32)))

    for _ in range(25):  # 0.5 s loud, the odd frame 0.1 s late and the next two at once
        clock.now += 0.02
        frames(1, 0.1)
    clock.now += PAUSE_S - 0.05
    frames(1, 0.1)
    clock.now += 0.5  # a 0.5 s stall (from 0.5 + PAUSE_S - 0.05 s); the client catches up at once
    frames(10, 0.2)
    clock.now += 2.0  # 1 s buffered while sending stalled, sent in one append
    recorder.observe_input(AudioReceived(np.full(RATE, 0.3, np.float32)))
    said(recorder)
    recorder.finish()
    settled()
    _, audio = read_wav(tmp_path / "s11.wav")
    user = audio[:, 0]

    def int16(level: float) -> int:
        return int(float_to_int16(np.array([level], np.float32))[0])

    jitter_end = 26 * FRAME  # the late frame follows on
    stalled = round((0.5 + PAUSE_S - 0.05 + 0.5) * RATE) - FRAME  # the burst's first frame ends on its arrival
    assert (user[:jitter_end] > 0).all() and (user[jitter_end:stalled] == 0).all()
    assert (user[stalled : stalled + 10 * FRAME] == int16(0.2)).all()
    buffered = stalled + FRAME + round(2.0 * RATE) - RATE  # ends on its arrival
    assert (user[stalled + 10 * FRAME : buffered] == 0).all() and (user[buffered:] == int16(0.3)).all()
    assert len(user) == buffered + RATE


@pytest.mark.parametrize(
    ("protocol", "opening", "rate"),
    [("realtime", SessionUpdate(sample_rate=24000), 24000), ("twilio", SessionStarted(8000), 8000)],
)
def test_the_recording_has_the_sessions_rate_and_protocol(tmp_path, protocol, opening, rate):
    """The rate comes from what the codec told the session, never a default (a Realtime session is 24 kHz)."""
    clock = Clock()
    recorder = SessionRecorder("s9", protocol, recording_dir=str(tmp_path), clock=clock)
    recorder.observe_input(opening)
    frame = rate // 50
    for _ in range(3 * 50):
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(frame, 0.1, np.float32)))
        recorder.observe_output(AgentAudio(np.full(frame, -0.1, np.float32)))
    said(recorder)
    report = recorder.finish()
    settled()
    assert (report.protocol, report.sample_rate) == (protocol, rate)
    wav_rate, audio = read_wav(tmp_path / "s9.wav")
    assert wav_rate == rate and 3 * rate <= len(audio) <= 3 * rate + frame  # the answer follows the user


def test_a_rate_switch_mid_session_is_resampled_onto_the_recordings_rate(tmp_path):
    clock = Clock()
    recorder = SessionRecorder("s10", "realtime", recording_dir=str(tmp_path), clock=clock)
    recorder.observe_input(SessionUpdate(sample_rate=24000))
    for _ in range(50):
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(480, 0.1, np.float32)))
    recorder.observe_input(SessionUpdate(sample_rate=8000))  # g711 from now on
    for _ in range(50):
        clock.now += 0.02
        recorder.observe_input(AudioReceived(np.full(160, 0.1, np.float32)))
    said(recorder)
    report = recorder.finish()
    settled()
    rate, audio = read_wav(tmp_path / "s10.wav")
    assert rate == report.sample_rate == 24000 and abs(len(audio) - 2 * 24000) <= 24


def test_retention_deletes_the_oldest_reports_first(tmp_path):
    for i in range(6):
        for suffix, size in ((".json", 100), (".wav", 1000)):
            path = tmp_path / f"r{i}{suffix}"
            path.write_bytes(b"x" * size)
            os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / "notes.txt").write_text("not ours")
    enforce_retention(tmp_path, Retention(max_files=8))
    assert sorted(p.name for p in tmp_path.glob("r*")) == [f"r{i}{s}" for i in range(2, 6) for s in (".json", ".wav")]
    enforce_retention(tmp_path, Retention(max_bytes=2300))
    assert sorted(p.name for p in tmp_path.glob("r*")) == ["r4.json", "r4.wav", "r5.json", "r5.wav"]
    assert (tmp_path / "notes.txt").exists()
    enforce_retention(tmp_path, Retention())  # no limits: nothing goes
    assert len(list(tmp_path.iterdir())) == 5


async def test_delivery_keeps_the_directory_within_its_quota(tmp_path):
    for i in range(5):
        recorder = SessionRecorder(f"q{i}", "ws")
        said(recorder)
        deliver(recorder.finish(), str(tmp_path), retention=Retention(max_files=3))
        settled()
        time.sleep(0.01)  # distinct modification times
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q2.json", "q3.json", "q4.json"]


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
        report = SessionRecorder("s4", "ws").report()
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


async def test_posts_share_one_client_and_a_full_queue_drops_and_counts(monkeypatch):
    release = threading.Event()
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"])))["session_id"])
            release.wait(10)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    monkeypatch.setattr(report_delivery, "POST_QUEUE", 3)
    metrics = ServerMetrics()
    dropped_before = report_delivery.reports_dropped()
    try:
        url = f"http://127.0.0.1:{http.server_address[1]}/reports"
        for i in range(report_delivery.POSTERS + 3 + 2):
            recorder = SessionRecorder(f"p{i}", "ws")
            said(recorder)
            deliver(recorder.finish(), url=url)
            await asyncio.sleep(0.1)  # the workers take theirs
        assert report_delivery.reports_dropped() - dropped_before == 2
        assert f"voice_agent_session_reports_dropped_total {float(report_delivery.reports_dropped())}" in (
            metrics.render().decode()
        )
        clients = {id(report_delivery._posting().client)}
        release.set()
        await report_delivery.wait_for_deliveries(10)
        assert len(received) == report_delivery.POSTERS + 3 and len(clients) == 1
    finally:
        release.set()
        http.shutdown()
        http.server_close()
