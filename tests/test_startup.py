"""Start-up: settings are checked before anything loads, and a model that cannot load stops the process."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import free_port
from voice_agent.config import Settings
from voice_agent.server.preflight import problems


def test_the_defaults_can_work():
    assert problems(Settings()) == []


def test_openai_without_a_url():
    [problem] = problems(Settings(llm="openai"))
    assert "--llm openai needs --llm-url" in problem
    assert problems(Settings(llm="openai", llm_url="http://127.0.0.1:9/v1")) == []
    assert "--llm-url must start with http" in problems(Settings(llm="openai", llm_url="127.0.0.1:9"))[0]


def test_thresholds_out_of_order():
    [problem] = problems(Settings(barge_in_min_speech_ms=300, barge_in_check_ms=250))
    assert "--barge-in-min-speech-ms must not exceed --barge-in-check-ms" in problem
    [problem] = problems(Settings(barge_in_check_ms=1000, barge_in_force_ms=900))
    assert "--barge-in-check-ms must not exceed --barge-in-force-ms" in problem
    [problem] = problems(Settings(end_silence_ms=3000))
    assert "--end-silence-ms must not exceed --end-silence-incomplete-ms" in problem


def test_files_that_do_not_exist(tmp_path):
    found = problems(Settings(tts_voice=str(tmp_path / "voice.onnx"), llm_model=str(tmp_path / "model.gguf")))
    assert any(p.startswith("--tts-voice") and "voice.onnx'" in p for p in found)
    assert any(p.startswith("--llm-model") for p in found)
    assert problems(Settings(stt_model=str(tmp_path / "whisper")))[0].startswith("--stt-model")
    assert problems(Settings(stt_model="tiny.en")) == []  # a model name, not a path
    voice = tmp_path / "v.onnx"
    voice.write_bytes(b"")
    assert "config" in problems(Settings(tts_voice=str(voice)))[0]  # its .onnx.json is missing
    (tmp_path / "v.onnx.json").write_text("{}")
    assert problems(Settings(tts_voice=str(voice))) == []


def test_numbers_out_of_range():
    found = problems(Settings(port=70000, vad_threshold=1.5, llm_instances=0, max_sessions=-1))
    assert len(found) == 4


def test_the_server_refuses_to_start_with_a_clear_message():
    result = subprocess.run(
        [sys.executable, "-m", "voice_agent", "serve", "--llm", "openai", "--barge-in-force-ms", "100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--llm openai needs --llm-url" in result.stderr
    assert "--barge-in-check-ms must not exceed --barge-in-force-ms" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_that_fails_to_load_stops_the_process_with_an_error(tmp_path):
    """An orchestrator restarts a process that exits; one that lives on, never ready, it would wait on forever."""
    (tmp_path / "whisper").mkdir()  # passes the start-up checks, but holds no model
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voice_agent",
            "serve",
            "--port",
            str(free_port()),
            "--stt-model",
            str(tmp_path / "whisper"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "loading the models failed" in result.stderr
