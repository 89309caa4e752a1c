"""Who may open a WebSocket: an optional shared token, and an optional list of browser origins.

Pure: it looks at a handshake's headers and query parameters and says why it
is refused, if it is. The token is compared in constant time. Browsers always
send ``Origin`` on a WebSocket handshake and cannot forge it, so the origin
list stops other web sites from using a visitor's browser as a client; other
clients send no ``Origin`` and are left to the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

UNAUTHORIZED = "unauthorized"
FORBIDDEN_ORIGIN = "forbidden_origin"


class AccessPolicy:
    def __init__(self, token: str = "", allowed_origins: Iterable[str] = ()):
        self._token = token.encode()
        origins = {_normal(o) for o in allowed_origins if o.strip()}
        self._origins = None if not origins or "*" in origins else origins

    def refusal(self, headers: Mapping[str, str], query: Mapping[str, str], check_token: bool = True) -> str | None:
        """:data:`FORBIDDEN_ORIGIN`, :data:`UNAUTHORIZED` or None. ``headers`` keys are lower case."""
        origin = headers.get("origin")
        if self._origins is not None and origin is not None and _normal(origin) not in self._origins:
            return FORBIDDEN_ORIGIN
        if check_token and self._token and not self._has_token(headers, query):
            return UNAUTHORIZED
        return None

    def _has_token(self, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        offered = credentials.strip() if scheme.lower() == "bearer" else query.get("token", "")
        # Both sides as bytes: compare_digest refuses non-ASCII str.
        return hmac.compare_digest(offered.encode(), self._token)


def _normal(origin: str) -> str:
    return origin.strip().rstrip("/").lower()
