"""`voice-agent bench` end to end: each run starts a real server with the real models and replays real turns."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from voice_agent.bench.harness import TURNS

pytestmark = pytest.mark.e2e


def bench(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "voice_agent", "bench", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def script(path, *turns: tuple[str, str]) -> str:
    """A turn script at ``path`` of the packaged turns: (FOLDER/NAME.flac, the turn's other YAML lines)."""
    path.write_text("turns:\n" + "".join(f"  - file: {TURNS / audio}\n{lines}" for audio, lines in turns))
    return str(path)


def test_latency_reports_a_level_and_the_server_memory(tmp_path):
    turns = script(
        tmp_path / "turns.yaml", ("bench_turns/open_tonight.flac", "    expect: Hello, are you open tonight?\n")
    )
    done = bench("latency", "--sessions", "1", "--script", turns, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "bench.json").read_text())
    (level,) = result["levels"]
    assert level["summary"]["turns"] == 1 and level["summary"]["unanswered"] == 0
    assert level["server_peak_rss_mb"] > 100 and result["server_peak_rss_mb"] >= level["server_peak_rss_mb"]
    assert level["server_loop_lag_ms"]["n"] > 0
    assert result["command"].startswith("voice-agent bench latency --sessions 1")
    assert "| 1 | 1 |" in (tmp_path / "out" / "bench.md").read_text()


def test_bargein_judges_an_interruption_and_passes_serve_options_through(tmp_path):
    turns = script(
        tmp_path / "turns.yaml",
        ("bargein_turns/q_menu.flac", "    tags: [question]\n"),
        ("bargein_turns/wait_question.flac", "    start: barge-in:800\n    tags: [interruption]\n"),
    )
    out = tmp_path / "out"
    done = bench(
        "bargein", "--script", turns, "--out", str(out), "--max-stop-p95-ms", "2000", "--", "--llm-temperature", "0"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "bargein.json").read_text())
    assert result["serve_args"] == ["--llm-temperature", "0"]
    (probe,) = result["probes"]
    assert (probe["tag"], probe["outcome"]) == ("interruption", "cleared")
    assert 0 < probe["stop_ms"] < 2000
    assert "serve --host 127.0.0.1 --port" in done.stderr and "--llm-temperature 0" in done.stderr
