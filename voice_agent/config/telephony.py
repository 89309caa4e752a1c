"""Telephony settings."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class TelephonySettings:
    """Telephony: Twilio Media Streams at /twilio, Telnyx at /telnyx."""

    public_host: str = option(
        "",
        "Public host[:port] the phone network reaches this server at, e.g. agent.example.com. "
        "POST /twilio/voice streams calls to wss://HOST/twilio and checks signatures "
        "against https://HOST/twilio/voice. Empty means the request's Host header.",
        "telephony",
    )
    telephony_token: str = option(
        "",
        "Shared secret that telephony streams must carry as the last path segment "
        "(wss://HOST/twilio/TOKEN); streams without it are refused. Empty accepts any stream.",
        "telephony",
    )
    twilio_auth_token: str = option(
        "",
        "Twilio auth token: POST /twilio/voice then answers only requests with a valid "
        "X-Twilio-Signature. Empty skips the check.",
        "telephony",
    )
    telephony_greeting: str = option(
        "",
        "What the agent says first on every call; the call's greeting parameter overrides it. "
        "Empty waits for the caller.",
        "telephony",
    )
    telephony_dtmf_template: str = option(
        "The caller pressed {digit}.",
        "Text input a key press becomes; {digit} is replaced by the key. Empty ignores key presses.",
        "telephony",
    )
