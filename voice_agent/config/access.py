"""Access control settings."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class AccessSettings:
    """Access control: tokens, origins, addresses and host names (see docs/operations.md)."""

    auth_token: str = option(
        "",
        "Shared secret /ws clients must present, as 'Authorization: Bearer TOKEN' or ?token=TOKEN; "
        "others get HTTP 401. With it set, /twilio and /telnyx take only streams carrying "
        "--telephony-token and are closed without one, and /metrics asks for it too (see --public-metrics). "
        "Empty lets anyone in. Prefer the environment variable: flags show in ps.",
        "access",
    )
    allowed_origins: tuple[str, ...] = option(
        (),
        "Comma-separated browser origins (scheme://host[:port]) allowed to open a WebSocket, or * for "
        "any; a handshake carrying another Origin gets HTTP 403. Empty allows only same-origin pages "
        "(the Origin's host is the Host header). Clients that send no Origin (not browsers) are unaffected.",
        "access",
    )
    allow_client_prompt: bool = option(
        False,
        "Let clients set the system prompt and the greeting (the native start message, Twilio and "
        "Telnyx custom parameters), up to 4000 and 500 characters; off: they get an "
        "option_not_allowed error and the session keeps the server's.",
        "access",
    )
    public_metrics: bool = option(
        False,
        "Serve GET /metrics to anyone; off: it asks for --auth-token too, when one is set.",
        "access",
    )
    # Addresses and host names (see docs/operations.md, "Access control")
    forwarded_allow_ips: tuple[str, ...] = option(
        (),
        "Comma-separated addresses or networks of reverse proxies whose X-Forwarded-For and X-Forwarded-Proto "
        "are believed (* any). Empty: none; every client is the address it connects from.",
        "access",
    )
    allowed_hosts: tuple[str, ...] = option(
        (),
        "Comma-separated host names requests may name in their Host header, besides localhost, IP addresses, "
        "--host and --public-host; * allows any. Others get HTTP 403 (against DNS rebinding); "
        "/healthz and /readyz answer any.",
        "access",
    )
