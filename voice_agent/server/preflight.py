"""Start-up checks of the settings.

A setting that cannot work should stop the server before it loads anything,
with a message that names the option, not surface minutes later as a stack
trace from a model loader or as a session that never answers.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Settings

# A model setting that starts like this is a path on this machine; anything else may be a hub name.
_PATH_PREFIXES = ("/", "./", "../", "~")


def problems(settings: Settings) -> list[str]:
    """Every problem found in ``settings``, one message each; empty when they can work."""
    found: list[str] = []
    s = settings
    if s.llm == "openai" and not s.llm_url:
        found.append("--llm openai needs --llm-url, the endpoint's base URL (e.g. http://127.0.0.1:8000/v1)")
    if s.llm_url and not s.llm_url.startswith(("http://", "https://")):
        found.append(f"--llm-url must start with http:// or https://; got {s.llm_url!r}")
    if not 0 < s.port < 65536:
        found.append(f"--port must be between 1 and 65535; got {s.port}")
    found += _in_order(
        ("--barge-in-min-speech-ms", s.barge_in_min_speech_ms),
        ("--barge-in-check-ms", s.barge_in_check_ms),
        ("--barge-in-force-ms", s.barge_in_force_ms),
    )
    found += _in_order(
        ("--end-silence-complete-ms", s.end_silence_complete_ms),
        ("--end-silence-ms", s.end_silence_ms),
        ("--end-silence-incomplete-ms", s.end_silence_incomplete_ms),
    )
    if not 0 < s.vad_threshold < 1:
        found.append(f"--vad-threshold must be between 0 and 1; got {s.vad_threshold}")
    for name in (
        "stt_threads",
        "stt_decode_threads",
        "stt_workers",
        "stt_beam_size",
        "llm_threads",
        "llm_prompt_threads",
        "llm_instances",
        "llm_max_tokens",
        "llm_context",
        "tts_threads",
    ):
        if getattr(s, name) < 1:
            found.append(f"{_flag(name)} must be at least 1; got {getattr(s, name)}")
    for name in (
        "max_sessions",
        "max_sessions_per_client",
        "max_sessions_per_telephony_token",
        "record_max_mb",
        "session_report_max_files",
        "session_report_max_mb",
        "idle_timeout_s",
        "max_session_s",
        "max_audio_rate",
        "max_messages_per_s",
        "max_bytes_per_s",
        "max_connections_per_s",
        "first_turn_timeout_s",
        "output_lead_ms",
        "tts_phrase_cache",
        "history_turns",
        "shutdown_grace_s",
        "vad_min_speech_ms",
        "max_turn_s",
        "capacity_target",
        "latency_budget_ms",
        "cpu_cores",
    ):
        if getattr(s, name) < 0:
            found.append(f"{_flag(name)} must not be negative; got {getattr(s, name)}")
    if s.history_answers < -1:
        found.append(f"{_flag('history_answers')} must be -1 (by model) or more; got {s.history_answers}")
    if s.tts_voice:
        found += _missing_file("--tts-voice", s.tts_voice)
        found += _missing_file("--tts-voice", s.tts_voice + ".json", "its .onnx.json config beside it")
    if s.llm_model and (s.llm == "llamacpp" or s.llm_model.startswith(_PATH_PREFIXES)):
        found += _missing_file("--llm-model", s.llm_model, kind="file" if s.llm == "llamacpp" else "any")
    if s.stt_model.startswith(_PATH_PREFIXES):
        found += _missing_file("--stt-model", s.stt_model, kind="folder")
    return found


def _in_order(*values: tuple[str, float]) -> list[str]:
    for (low_name, low), (high_name, high) in zip(values, values[1:]):
        if low > high:
            names = " <= ".join(name for name, _ in values)
            got = ", ".join(f"{name} {value}" for name, value in values)
            return [f"{low_name} must not exceed {high_name} ({names}); got {got}"]
    return []


def _missing_file(flag: str, value: str, what: str = "", kind: str = "file") -> list[str]:
    path = Path(value).expanduser()
    exists = path.is_file() if kind == "file" else path.is_dir() if kind == "folder" else path.exists()
    if exists:
        return []
    return [f"{flag}: {what or 'the ' + kind} {str(path)!r} does not exist"]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
