"""`voice-agent replay` against a real server: two turns, the second one barging in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
TURNS = ROOT / "voice_agent" / "bench" / "turns" / "bench_turns"

REPORT_KEYS = {
    "schema",
    "created",
    "url",
    "transport",
    "sample_rate",
    "machine",
    "options",
    "script",
    "runs",
    "summary",
    "thresholds",
    "failures",
    "passed",
    "histogram",
}
RUN_KEYS = {
    "concurrency",
    "session",
    "repeat",
    "duration_s",
    "failure",
    "errors",
    "turns",
    "agent_speech_s",
    "dry_spells_ms",
    "echo_paths",
    "timeline",
}
TURN_KEYS = {
    "index",
    "name",
    "start",
    "sent_s",
    "sent_frame",
    "speech_start_s",
    "speech_end_s",
    "answer_s",
    "voice_to_voice_ms",
    "server_voice_to_voice_ms",
    "client_minus_server_ms",
    "first_transcript_ms",
    "final_transcript_ms",
    "transcript",
    "expect",
    "wer",
    "answer",
    "agent_spoke_during_turn",
    "server",
    "barge_in_stop_ms",
    "barge_in_cleared",
}
SERVER_METRICS = {
    "turn",
    "voice_to_voice_ms",
    "endpoint_ms",
    "stt_final_ms",
    "stt_speculative",
    "llm_ttft_ms",
    "first_chunk_ms",
    "tts_ttfa_ms",
}
FIGURES = {
    "voice_to_voice_ms",
    "server_voice_to_voice_ms",
    "client_minus_server_ms",
    "first_transcript_ms",
    "final_transcript_ms",
    "barge_in_stop_ms",
}


def test_replay_two_turns_against_a_real_server(ws_url, tmp_path):
    script = tmp_path / "two.yaml"
    script.write_text(
        f"""
turns:
  - file: {TURNS / "menu.flac"}
    expect: Tell me about your menu. What do you recommend for dinner and dessert?
  - file: {TURNS / "make_it_five.flac"}
    start: barge-in:1000
    expect: Sorry, make that five people, not four.
"""
    )
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voice_agent",
            "replay",
            "--url",
            ws_url,
            "--script",
            str(script),
            "--out",
            str(out),
            "--reply-timeout",
            "45",
            "--max-p50-ms",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    # A 1 ms budget cannot be met: the exit status says so, and the report is still complete.
    assert result.returncode == 1, result.stderr
    assert "threshold missed: 1 session(s): voice-to-voice p50" in result.stderr
    assert "v2v client" in result.stdout and "menu" in result.stdout

    report = json.loads((out / "report.json").read_text())
    assert set(report) == REPORT_KEYS
    assert report["schema"] == "voice-agent-replay/1" and report["passed"] is False
    (run,) = report["runs"]
    assert set(run) == RUN_KEYS and run["failure"] is None and run["errors"] == []
    first, second = run["turns"]
    for turn in (first, second):
        assert set(turn) == TURN_KEYS
        assert SERVER_METRICS <= set(turn["server"])  # the server may add figures
        for key in (
            "voice_to_voice_ms",
            "server_voice_to_voice_ms",
            "first_transcript_ms",
            "final_transcript_ms",
            "wer",
        ):
            assert turn[key] is not None, (key, turn)
        assert 0 < turn["voice_to_voice_ms"] < 20_000
        # Loopback: the client and the server time the same instants, give or take a few frames.
        assert abs(turn["client_minus_server_ms"]) < 250, turn
        assert turn["speech_start_s"] < turn["speech_end_s"] < turn["answer_s"]
        assert turn["transcript"] and turn["answer"]
        assert turn["wer"] < 0.5, turn
    # The second turn interrupted the first answer: the agent stopped and said so with `clear`.
    assert second["barge_in_cleared"] is True
    assert 0 < second["barge_in_stop_ms"] < 5000
    assert second["agent_spoke_during_turn"] is True
    summary = report["summary"]["1"]
    assert {
        "runs",
        "failed_runs",
        "turns",
        "unanswered",
        "agent_spoke_during_turn",
        "barge_ins_cleared",
        "wer_mean",
        "dry_spells_ms",
    } | FIGURES == set(summary)
    assert summary["voice_to_voice_ms"]["n"] == 2 and summary["unanswered"] == 0
    for picture in (run["timeline"], report["histogram"]):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
