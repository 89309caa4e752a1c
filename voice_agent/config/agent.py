"""Agent settings: tools, hooks, call control and session reports."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class AgentSettings:
    """Agents and their tools (see docs/agents.md)."""

    agent: str = option(
        "",
        "The agent to serve, as MODULE_OR_FILE:NAME (e.g. examples/restaurant/agent.py:agent): "
        "a voice_agent.Agent with instructions, greeting, tools and hooks. Empty serves the plain "
        "assistant of --system-prompt.",
        "agent",
    )
    tool_timeout_s: float = option(
        10.0, "Longest a tool call may take; past it the model is told it timed out.", "agent"
    )
    # About 300 ms: a short lookup ends unnoticed, a longer wait is covered before it reads as a dead line.
    tool_filler_ms: int = option(
        300, 'A tool call still running after this long makes the agent say a filler ("One moment...").', "agent"
    )
    tool_filler_repeat_ms: int = option(2500, "Time between further fillers while a tool call goes on.", "agent")
    tool_max_rounds: int = option(
        4, "Tool rounds per answer; then the model is asked once more without tools, to answer in words.", "agent"
    )
    # Hardening (docs/agents.md, "Limits"): what one session's tool calls and hooks may take of the shared server.
    tool_max_calls_per_answer: int = option(
        8,
        "Tool calls one answer may make, over all its rounds; the model is told past it that a call was not run.",
        "agent",
    )
    tool_max_calls_per_session: int = option(
        100, "Tool calls one session may make; past it the model is told that a call was not run.", "agent"
    )
    tool_concurrency: int = option(
        2, "Tool calls one session runs at once (its share of the tool threads); the others wait their turn.", "agent"
    )
    agent_hook_timeout_s: float = option(
        5.0, "Longest an agent hook may take; past it the session stops waiting for it and goes on.", "agent"
    )
    twilio_api_url: str = option(
        "https://api.twilio.com",
        "Base URL of Twilio's REST API, used by end_call and transfer_call on Twilio calls "
        "(credentials from TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN, or TWILIO_API_KEY and TWILIO_API_SECRET).",
        "agent",
    )


@dataclass(frozen=True)
class ReportSettings:
    """Session reports and recordings (see docs/agents.md)."""

    session_report_dir: str = option(
        "", "Write each session's report as DIR/SESSION_ID.json (and .wav with --record). Empty: none.", "agent"
    )
    session_report_url: str = option(
        "", "POST each session's report as JSON to this URL, retried with backoff. Empty: none.", "agent"
    )
    record: bool = option(
        False,
        "Record each session in stereo (user left, agent right) at its own sample rate, as "
        "DIR/SESSION_ID.wav beside its report (needs --session-report-dir); written as it goes.",
        "agent",
    )
    record_max_mb: float = option(
        200.0,
        "Largest recording of one session, in MiB (16 kHz: about 58 MiB an hour); it stops there. 0 means no cap.",
        "agent",
    )
    session_report_max_files: int = option(
        10000,
        "Files (JSON and WAV) the report directory may hold; past it the oldest reports are deleted. 0 means no limit.",
        "agent",
    )
    session_report_max_mb: float = option(
        2048.0,
        "MiB the report directory's reports may take; past it the oldest are deleted. 0 means no limit.",
        "agent",
    )
