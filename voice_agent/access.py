"""Who may open a WebSocket: an optional shared token, and the browser origins allowed.

Pure: it looks at a handshake's headers and query parameters and says why it
is refused, if it is. The token is compared in constant time. Browsers always
send ``Origin`` on a WebSocket handshake and cannot forge it, and a WebSocket
is not bound by the same-origin policy, so without a check any web site could
use a visitor's browser (and its network position) as a client. By default
only pages the server itself served get in (the Origin's host is the Host
header); an operator can list other origins, or allow any with ``*``. Other
clients send no ``Origin`` and are left to the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

UNAUTHORIZED = "unauthorized"
FORBIDDEN_ORIGIN = "forbidden_origin"
ANY_ORIGIN = "*"


class AccessPolicy:
    def __init__(self, token: str = "", allowed_origins: Iterable[str] = ()):
        self._token = token.encode()
        origins = {_normal(o) for o in allowed_origins if o.strip()}
        self._any_origin = ANY_ORIGIN in origins
        self._origins = origins - {ANY_ORIGIN}

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    def refusal(self, headers: Mapping[str, str], query: Mapping[str, str], check_token: bool = True) -> str | None:
        """:data:`FORBIDDEN_ORIGIN`, :data:`UNAUTHORIZED` or None. ``headers`` keys are lower case."""
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, headers.get("host", "")):
            return FORBIDDEN_ORIGIN
        if check_token and self._token and not self.carries_token(headers, query):
            return UNAUTHORIZED
        return None

    def _origin_allowed(self, origin: str, host: str) -> bool:
        if self._any_origin or _normal(origin) in self._origins:
            return True
        # Same origin: the page came from this server. "null" (a sandboxed page, a file) has no host.
        origin_host = _host(origin)
        return bool(origin_host) and origin_host == host.strip().lower()

    def carries_token(self, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        """Whether a request carries the token, as ``Authorization: Bearer`` or a ``token`` query parameter."""
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        offered = credentials.strip() if scheme.lower() == "bearer" else query.get("token", "")
        # Both sides as bytes: compare_digest refuses non-ASCII str.
        return hmac.compare_digest(offered.encode(), self._token)


def _normal(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def _host(origin: str) -> str:
    try:
        return urlsplit(_normal(origin)).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return ""
