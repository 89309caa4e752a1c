"""TwiML that connects a call to the Media Stream, and Twilio's request signature.

Pure functions: the routes in ``app.py`` feed them settings and request
data. Twilio signs every webhook with ``X-Twilio-Signature``: the base64
HMAC-SHA1, keyed with the account's auth token, of the full URL Twilio
requested followed by every POST parameter as name and value, sorted by name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from xml.sax.saxutils import quoteattr


def stream_url(public_host: str, path: str, token: str = "", call_token: str = "") -> str:
    """The ``wss://`` URL the bridge connects to: ``path``, then the token and the call token as path segments.

    They go in the path because Twilio drops query strings from
    ``<Stream url>``; custom parameters would only arrive after the socket
    was accepted. The token comes first: access logs redact that segment.
    """
    segments = [segment for segment in (token, call_token) if segment]
    return "/".join([f"wss://{bare_host(public_host)}{path}", *segments])


def bare_host(public_host: str) -> str:
    """``host[:port]`` from a setting that may carry a scheme or a trailing slash."""
    return public_host.split("://", 1)[-1].rstrip("/")


def connect_stream(url: str, parameters: dict[str, str] | None = None) -> str:
    """TwiML that bridges the call to a bidirectional Media Stream at ``url``."""
    children = "".join(
        f"<Parameter name={quoteattr(name)} value={quoteattr(value)}/>" for name, value in (parameters or {}).items()
    )
    stream = f"<Stream url={quoteattr(url)}>{children}</Stream>" if children else f"<Stream url={quoteattr(url)}/>"
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Connect>{stream}</Connect></Response>'


def signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """The ``X-Twilio-Signature`` Twilio computes for a request to ``url`` with these form fields."""
    values: dict[str, set[str]] = {}
    for name, value in params:
        values.setdefault(name, set()).add(value)
    data = url + "".join(name + value for name in sorted(values) for value in sorted(values[name]))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def is_valid_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]], claimed: str) -> bool:
    # Bytes, not str: compare_digest refuses non-ASCII text, and a header can carry any.
    return hmac.compare_digest(signature(auth_token, url, params).encode(), (claimed or "").encode())
