"""Limits and load-based admission."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class LimitsSettings:
    """Limits on sessions, messages and clients (see docs/operations.md)."""

    max_sessions: int = option(
        8,
        "Concurrent sessions per process; further connections are closed with 1013 "
        "(try again later, reason 'server is full'). 0 means no limit.",
        "limits",
    )
    idle_timeout_s: float = option(
        60.0,
        "Close a session in which nobody spoke or typed for this long (audio frames without speech do not "
        "count; the agent's answers do). 0 means never.",
        "limits",
    )
    max_session_s: float = option(
        3600.0, "Close a session after this long, whatever it is doing. 0 means never.", "limits"
    )
    max_audio_rate: float = option(
        1.5,
        "Seconds of audio a client may send per second of wall time, averaged with a 3 s burst; "
        "frames beyond it are dropped with an audio_rate_exceeded error. 0 means no limit.",
        "limits",
    )
    max_messages_per_s: int = option(
        200,
        "Messages a client may send per second, averaged with a 2 s burst (a live client sends "
        "about 50); a client over it is closed with 1008. 0 means no limit.",
        "limits",
    )
    # 48 kHz PCM16 is 96 KB/s and a Twilio stream about 14 KB/s; the 2 s burst takes one message of the
    # largest size the server accepts (1 MiB).
    max_bytes_per_s: int = option(
        512 * 1024,
        "Bytes (of text messages: characters) one client address may send per second, all its connections "
        "together and across reconnects, averaged with a 2 s burst; the connection over it is closed with "
        "1008. Telephony streams have a budget each. 0 means no limit.",
        "limits",
    )
    max_pending_items: int = option(
        32,
        "Realtime: user items (typed text, committed turns) a session may hold waiting for a response; "
        "past it conversation.item.create gets a too_many_pending_items error. 0 means no limit.",
        "limits",
    )
    max_pending_chars: int = option(
        8000,
        "Realtime: characters of typed text a session may hold waiting for a response; past it "
        "conversation.item.create gets a pending_text_too_long error. 0 means no limit.",
        "limits",
    )
    max_sessions_per_client: int = option(
        4,
        "Concurrent sessions from one client address; further connections are closed with 1013 "
        "(reason 'too many sessions from this address'). Behind a proxy, see docs/operations.md. 0 means no limit.",
        "limits",
    )
    # Per client address, across connections (see docs/operations.md, "Limits")
    max_connections_per_s: float = option(
        5.0,
        "WebSocket handshakes one client address may start per second, with a 4 s burst (20 at the default); "
        "past it HTTP 429 with Retry-After. Telephony streams with the right token do not count. 0 means no limit.",
        "limits",
    )
    first_turn_timeout_s: float = option(
        30.0,
        "Close a session whose user has not spoken or typed yet after this long without speech "
        "(the agent's greeting does not count); --idle-timeout-s applies after the first turn. 0: only that.",
        "limits",
    )
    max_sessions_per_telephony_token: int = option(
        0,
        "Concurrent telephony streams (/twilio, /telnyx) carrying one telephony token, so that phone calls "
        "cannot take every slot; further streams are closed with 1013. 0 means only --max-sessions applies.",
        "limits",
    )


@dataclass(frozen=True)
class CapacitySettings:
    """Admission by measured load (voice_agent/server/capacity.py, docs/operations.md)."""

    # A session's measured cost falls as sessions are added (partial transcripts and LLM prefills are
    # skipped while their workers are busy), so the estimate from a lone session is the lowest. At 0.8 it
    # admits 5 on the 2-core machine from one session's cost and 6 at the cost measured under load, below
    # the knee `bench load` measured there (8 within the 1 s budget): room for turns in bursts and for CPU
    # that other processes take (docs/results/capacity.md).
    capacity_target: float = option(
        0.8,
        "Admit a session only while the predicted CPU use with it, at each session's measured cost, stays "
        "within this share of --cpu-cores; past it /readyz answers 503 and new connections get 1013 "
        "'overloaded; retry after 5 s'. 0: no such limit.",
        "limits",
    )
    latency_budget_ms: int = option(
        1000,
        "Admit a session only while the median voice-to-voice of the last minute's turns stays within this; "
        "past it /readyz answers 503 and new connections get 1013 'over_budget; retry after 5 s'. 0: no such limit.",
        "limits",
    )
    cpu_cores: float = option(
        0.0,
        "The cores this process may use, for --capacity-target (set it to a container's CPU limit). "
        "0: the cores the process may run on.",
        "limits",
    )
