"""Who may open a WebSocket: an optional shared token, and the browser origins allowed.

Pure: it looks at a handshake's headers and query parameters and says why it
is refused, if it is. The token is compared in constant time. Browsers always
send ``Origin`` on a WebSocket handshake and cannot forge it, and a WebSocket
is not bound by the same-origin policy, so without a check any web site could
use a visitor's browser (and its network position) as a client. By default
only pages the server itself served get in (the Origin's host is the Host
header); an operator can list other origins, or allow any with ``*``. Other
clients send no ``Origin`` and are left to the token.

:class:`HostPolicy` guards against DNS rebinding: a page on a name its owner
points at this server's address afterwards is same-origin with it, so the
Origin check lets it in. The Host header names what the browser thinks it
talks to, and only names this server answers to get in.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

UNAUTHORIZED = "unauthorized"
FORBIDDEN_ORIGIN = "forbidden_origin"
ANY_ORIGIN = "*"
FORBIDDEN_HOST = "forbidden_host"
ANY_HOST = "*"
_HOST = re.compile(r"(?:\[([0-9a-f:.]+)\]|([a-z0-9._-]+))(?::[0-9]{1,5})?")


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


class HostPolicy:
    """Which Host headers this server answers: localhost names, IP addresses, and the names it is given.

    An IP address cannot be rebound: a page served from one is that address's own. ``names``: the listen
    address, ``--public-host``, ``--allowed-hosts`` (with or without a port, which is not compared);
    ``*`` among them allows any host.
    """

    def __init__(self, names: Iterable[str]):
        hosts = {_hostname(name) for name in names if name.strip()}
        self._any = ANY_HOST in {name.strip() for name in names}
        self._names = hosts - {""}

    def allows(self, host_header: str | None) -> bool:
        # A request without Host is HTTP/1.0 from some tool, never a browser.
        if self._any or host_header is None:
            return True
        host = _hostname(host_header)
        if not host:
            return False
        if host == "localhost" or host.endswith(".localhost") or host in self._names:
            return True
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return False
        return True


def _hostname(host: str) -> str:
    """The name or address in a Host header, lower case, without port, brackets or a final dot; "" if malformed.

    A setting may also carry a scheme and a trailing slash (``--public-host https://agent.example.com/``).
    """
    match = _HOST.fullmatch(host.strip().lower().split("://", 1)[-1].rstrip("/"))
    return "" if match is None else (match[1] or match[2]).rstrip(".")
