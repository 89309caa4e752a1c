"""Call tokens: tie a Twilio Media Stream to a call that ``POST /twilio/voice`` answered.

The webhook (signed by Twilio) puts a call token into the stream URL of the
TwiML it returns: ``CALLSID.EXPIRES.NONCE.MAC``, where MAC is an HMAC-SHA256
of the call SID, the expiry time and a random nonce. The stream route checks the token at the
handshake, and the codec then refuses a ``start`` whose ``callSid`` is not
that call. Only such a stream's call is ever updated through Twilio's REST
API: a stream's own word for its ``callSid`` is never trusted.

The key is derived from a secret every gateway of a deployment shares anyway
(the telephony token, else the Twilio auth token), so a token issued by one
process behind a load balancer is good on every other. With neither set, a
process makes a random key of its own: one process only.

A token expires :data:`TTL_S` after it was issued (Twilio connects the
stream within seconds), and each opens one stream per process: a URL read
from a log cannot be used again there. A call that comes back to the webhook
(TwiML that redirects after its stream ended) gets a new token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable

from .telephony import TWILIO_CALL_SID

TTL_S = 300  # leaves room for clocks that differ between gateways
CALL_TOKEN = re.compile(rf"({TWILIO_CALL_SID.pattern})\.([0-9]{{1,12}})\.([0-9a-f]{{16}})\.([0-9a-f]{{32}})")
_KEY_LABEL = b"voice-agent twilio call token"


def looks_like_call_token(segment: str) -> bool:
    return CALL_TOKEN.fullmatch(segment) is not None


class CallTokens:
    """Issues and redeems call tokens with one process-wide key."""

    def __init__(self, secret: str = "", clock: Callable[[], float] = time.time):
        self._key = (
            hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest() if secret else secrets.token_bytes(32)
        )
        self._clock = clock
        self._redeemed: dict[str, int] = {}  # the MACs of tokens used -> their expiry

    def issue(self, call_sid: str) -> str:
        expires, nonce = int(self._clock()) + TTL_S, secrets.token_hex(8)
        return f"{call_sid}.{expires}.{nonce}.{self._mac(call_sid, expires, nonce)}"

    def redeem(self, token: str) -> str | None:
        """The call SID ``token`` was issued for, once: None if it is forged, expired or used already."""
        match = CALL_TOKEN.fullmatch(token)
        if match is None:
            return None
        call_sid, expires, nonce, mac = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        now = self._clock()
        if not hmac.compare_digest(mac, self._mac(call_sid, expires, nonce)) or not now <= expires <= now + 2 * TTL_S:
            return None
        self._redeemed = {used: until for used, until in self._redeemed.items() if until >= now}
        if mac in self._redeemed:
            return None
        self._redeemed[mac] = expires
        return call_sid

    def _mac(self, call_sid: str, expires: int, nonce: str) -> str:
        return hmac.new(self._key, f"{call_sid}.{expires}.{nonce}".encode(), hashlib.sha256).hexdigest()[:32]
