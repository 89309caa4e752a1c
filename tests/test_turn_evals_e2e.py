"""The real-speech and phone groups of the endpointing eval and the barge-in eval's echo rig, at a small size.

Each runs `voice-agent bench ...` as a user would: a real server with the
default models on a free port, the replay client over a real WebSocket.
The full runs are commands (docs/turn-taking.md, "Measuring").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from voice_agent.bench.bargein import OUTCOMES
from voice_agent.replay.echo import DELAY_MS, GAIN_DB

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
BARGEIN_TURNS = ROOT / "voice_agent" / "bench" / "turns" / "bargein_turns"


def bench(*args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "voice_agent", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_the_real_group_at_a_small_size_reports_its_paused_turns_and_overlap(tmp_path):
    out = tmp_path / "endpointing"
    result = bench("endpointing", "--group", "real", "--limit", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "endpoint.json").read_text())
    [point] = report["points"]
    assert point["failure"] is None
    assert list(point["groups"]) == ["real"]
    real = point["groups"]["real"]
    # The real script lists its paused turns first: both turns pause, by the pipeline's own VAD.
    assert (real["turns"], real["paused_turns"]) == (2, 2)
    assert len(point["turns"]) == 2
    for turn in point["turns"]:
        assert "group:real" in turn["tags"] and turn["pauses_ms"] and min(turn["pauses_ms"]) >= 280
        assert turn["overlap_ms"] >= 0.0
    heard = [turn for turn in point["turns"] if turn["overlap_ms"] > 0]
    assert real["heard_in_pause"] == len(heard) and real["overlap_ms"]["n"] == len(heard)
    assert real["heard_in_pause_rate"] == round(len(heard) / 2, 4)
    answered = [turn for turn in point["turns"] if not turn["cut_off"] and turn["voice_to_voice_ms"] is not None]
    assert real["voice_to_voice_ms"]["n"] == len(answered)
    assert f"| server defaults | real | 2 | {real['false_cutoffs']}/2 |" in (out / "endpoint.md").read_text()


def test_the_real_group_replays_over_a_phone_call(tmp_path):
    out = tmp_path / "endpointing"
    result = bench("endpointing", "--group", "real", "--limit", "1", "--transport", "twilio", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "endpoint.json").read_text())
    [point] = report["points"]
    assert report["transport"] == "twilio" and point["failure"] is None
    replay = json.loads((out / point["replay_report"]).read_text())
    assert (replay["transport"], replay["sample_rate"]) == ("twilio", 8000)
    [turn] = point["turns"]
    # Media Streams carry audio and marks only: the figures are the client's own, the server's are missing.
    assert turn["pauses_ms"] and turn["endpoint_ms"] is None
    assert turn["cut_off"] or turn["voice_to_voice_ms"] > 0


def test_the_phone_group_reports_its_cut_ins_beside_the_server_wait(tmp_path):
    out = tmp_path / "endpointing"
    result = bench("endpointing", "--group", "phone", "--limit", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "endpoint.json").read_text())
    [point] = report["points"]
    assert point["failure"] is None and list(point["groups"]) == ["phone"]
    phone = point["groups"]["phone"]
    assert [turn["name"] for turn in point["turns"]] == ["ami_dev00_01_phone", "ami_dev00_02_phone"]
    # Through the μ-law codec over the native transport, the server's own endpoint delay still comes back.
    ended = [turn["endpoint_ms"] for turn in point["turns"] if not turn["cut_off"]]
    assert all(ms is not None and ms > 0 for ms in ended) and phone["wait_ms"]["n"] == len(ended)
    row = f"| server defaults | phone | 2 | {phone['false_cutoffs']}/{phone['paused_turns']} |"
    assert row in (out / "endpoint.md").read_text()


def test_the_echo_rig_feeds_the_agents_voice_back_and_counts_what_it_did_about_it(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text(
        f"""turns:
  - file: {BARGEIN_TURNS / "q_menu.flac"}
    tags: [question]
  - file: {BARGEIN_TURNS / "wait_question.flac"}
    start: barge-in:800
    tags: [interruption]
  - file: {BARGEIN_TURNS / "q_wine.flac"}
    tags: [question]
  - file: {BARGEIN_TURNS / "ack_yeah.flac"}
    start: barge-in:800
    tags: [acknowledgement]
"""
    )
    out = tmp_path / "bargein"
    result = bench("bargein", "--script", str(script), "--echo", "7", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "bargein.json").read_text())
    assert report["failure"] is None
    echo = report["echo"]
    assert echo["on"] and echo["seed"] == 7
    [run] = echo["runs"]
    assert len(run["paths"]) == 1, "one path for the call, as in a real room (--echo-paths call, the default)"
    assert echo["drawn_per"] == "call" and echo["room"] == run["paths"][0]["room"] == "small"
    for path in run["paths"]:
        assert GAIN_DB[0] <= path["gain_db"] <= GAIN_DB[1] and DELAY_MS[0] <= path["delay_ms"] <= DELAY_MS[1]
    for kind in ("clears", "pauses", "stopped", "turns"):
        assert echo[kind] == len(run[kind])
    assert echo["stops"] == echo["clears"] + echo["pauses"] + echo["stopped"] + echo["turns"]
    assert run["script_turns"] == echo["script_turns"] == 4 and echo["user_turns"] == run["user_turns"] >= 1
    assert echo["voice_stretch_ms"]["n"] == len(run["voice_stretches_ms"]) >= 1
    assert [(p["name"], p["tag"]) for p in report["probes"]] == [
        ("wait_question", "interruption"),
        ("ack_yeah", "acknowledgement"),
    ]
    assert all(p["outcome"] in OUTCOMES for p in report["probes"])
    replay = json.loads((out / report["replay_report"]).read_text())
    assert replay["runs"][0]["echo_paths"] == run["paths"]
    assert "Echo rig on (seed 7, a small room, a path drawn per call)" in (out / "bargein.md").read_text()
