"""Process logging: a session id on every line, text or JSON, and no secrets.

The session id lives in a context variable. A connection sets it once; every
task the session starts copies the context, so lines logged on its behalf,
by any module, carry the id without being passed it. Lines outside any session
show ``-``.

Secrets are removed from the formatted line, whoever logged it: the
configured tokens wherever they appear, a ``token=`` query parameter, and the
token segment of a telephony stream path (uvicorn logs every WebSocket path).
Query strings are read as the server reads them, percent-decoded: uvicorn
logs them as sent, and ``?%74oken=%73ecret`` is a token too.

A client can make its session log a line per message (each malformed one is
a warning), so a session's lines below ERROR are rate-limited: a flood of
garbage must not fill the disk. The next line that gets through says how many
were dropped. Control characters in a text line's message are escaped, so a
value a client sent cannot forge a line or drive the terminal.

Tracebacks are throttled apart from that: a client can make one failure
happen once a message (an answer that fails, a tool that raises), and an
ERROR line passes the per-session limit. :func:`log_exception` logs a call
site's first few tracebacks, then one line naming the exception, at WARNING,
until the call site's allowance refills.

What users say is theirs: lines that carry their words log at
:func:`words_level`, DEBUG unless the operator asked for transcripts
(``--log-transcripts``). See ``docs/operations.md`` for what is logged.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import re
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus

from .printable import escape_controls
from .rate_limit import RateLimit

NO_SESSION = "-"
REDACTED = "***"

_session_id: contextvars.ContextVar[str] = contextvars.ContextVar("session_id", default=NO_SESSION)
_words_level = logging.DEBUG

_QUERY = re.compile(r"\?[^\s\"'#]+")
_SECRET_PARAMETERS = ("token", "access_token")
_SECRET_PATTERNS = (
    # /twilio/TOKEN and /telnyx/TOKEN, not the /twilio/voice webhook.
    re.compile(r"(/(?:twilio|telnyx)/)(?!voice(?:[\s\"'?]|$))[^/\s\"'?]+"),
    re.compile(r"(?i)(authorization:\s*bearer\s+)\S+"),
)

PROJECT_LOGGER = "voice_agent"
SESSION_LINES_PER_S = 5.0
SESSION_LINES_BURST = 50
# Lines outside any session (start-up, handshakes refused for a token or an origin) share one bucket:
# a flood of handshakes without the token must not fill the disk either.
OUTSIDE_LINES_PER_S = 20.0
OUTSIDE_LINES_BURST = 200
TRACKED_SESSIONS = 10_000  # the least recently logging ones are forgotten
# Per call site, across sessions: enough to see a fault and its variants, not a flood of the same one.
TRACEBACKS_BURST = 3
TRACEBACKS_PER_S = 1 / 60

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(session)s] %(message)s"


def start_session() -> str:
    """Give the current context (a connection's task) a fresh session id, and return it."""
    session_id = uuid.uuid4().hex[:8]
    _session_id.set(session_id)
    return session_id


class TracebackLimit:
    """How many tracebacks each call site may still log: a token bucket per (logger, message)."""

    def __init__(self, rate: float = TRACEBACKS_PER_S, burst: float = TRACEBACKS_BURST, clock=time.monotonic):
        self._rate, self._burst, self._clock = rate, burst, clock
        self._sites: dict[tuple[str, str], tuple[RateLimit, int]] = {}

    def take(self, site: tuple[str, str]) -> tuple[bool, int]:
        """Whether ``site`` may log a traceback now, and how many it left out since its last one."""
        limit, left_out = self._sites.get(site) or (RateLimit(self._rate, self._burst, self._clock), 0)
        allowed = limit.take(1)
        self._sites[site] = (limit, 0 if allowed else left_out + 1)
        return allowed, left_out


_tracebacks = TracebackLimit()


def log_exception(logger: logging.Logger, message: str, *args: object) -> None:
    """Log the exception being handled, as ``logger.exception`` does while this call site is under its
    traceback allowance; past it, one WARNING line that names the exception (the session's line limit applies)."""
    allowed, left_out = _tracebacks.take((logger.name, message))
    if allowed:
        suffix = f" ({left_out} more like it without a traceback since the last one)" if left_out else ""
        logger.error(message + suffix, *args, exc_info=True)
        return
    exc = sys.exc_info()[1]
    named = "" if exc is None else f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    logger.warning(message + " (%s; traceback left out: too many)", *args, named)


def words_level() -> int:
    """The level for a line that carries what a user said: DEBUG, or INFO with ``--log-transcripts``."""
    return _words_level


def ensure_session() -> str:
    """The current context's session id, given it one if it has none yet."""
    session_id = _session_id.get()
    return start_session() if session_id == NO_SESSION else session_id


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()):
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = _QUERY.sub(self._query, text)
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(r"\g<1>" + REDACTED, text)
        return text

    def _query(self, match: re.Match[str]) -> str:
        """A query string with the value of every token parameter, and of any holding a secret, replaced."""
        parameters = match[0][1:].split("&")
        for i, parameter in enumerate(parameters):
            name, equals, value = parameter.partition("=")
            values = (unquote(value), unquote_plus(value))
            if equals and (
                unquote_plus(name).strip().lower() in _SECRET_PARAMETERS
                or any(secret in decoded for decoded in values for secret in self._secrets)
            ):
                parameters[i] = f"{name}={REDACTED}"
        return "?" + "&".join(parameters)


class SessionFilter(logging.Filter):
    """Stamps every record with the session id of the context it was logged in."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.session = _session_id.get()
        return True


class SessionRateLimit(logging.Filter):
    """Drops a session's lines below ERROR past a rate; the next line through counts what was dropped.

    Lines outside any session are limited together, at ``outside_rate``.
    """

    def __init__(
        self,
        rate: float = SESSION_LINES_PER_S,
        burst: float = SESSION_LINES_BURST,
        clock=time.monotonic,
        outside_rate: float = OUTSIDE_LINES_PER_S,
        outside_burst: float = OUTSIDE_LINES_BURST,
    ):
        super().__init__()
        self._rate, self._burst, self._clock = rate, burst, clock
        self._sessions: OrderedDict[str, tuple[RateLimit, int]] = OrderedDict()
        self._outside = RateLimit(outside_rate, outside_burst, clock)
        self._outside_dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        session = getattr(record, "session", NO_SESSION)
        if session == NO_SESSION:
            allowed = self._outside.take(1)
            self._outside_dropped = self._count(record, allowed, self._outside_dropped, "outside sessions")
            return allowed
        known = self._sessions.pop(session) if session in self._sessions else None
        limit, dropped = known or (RateLimit(self._rate, self._burst, self._clock), 0)
        allowed = limit.take(1)
        self._sessions[session] = (limit, self._count(record, allowed, dropped, "of this session"))
        if len(self._sessions) > TRACKED_SESSIONS:
            self._sessions.popitem(last=False)
        return allowed

    @staticmethod
    def _count(record: logging.LogRecord, allowed: bool, dropped: int, whose: str) -> int:
        """The lines dropped so far after this one; a line let through reports the gap before it."""
        if not allowed:
            return dropped + 1
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} earlier line(s) {whose} dropped: too many)"
            record.args = None
        return 0


class TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor):
        super().__init__(TEXT_FORMAT)
        self._redact = redact

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)  # the traceback, added after this, keeps its lines
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, session, message, and the traceback if any."""

    def __init__(self, redact: Redactor):
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "session": getattr(record, "session", NO_SESSION),
            "message": self._redact(record.getMessage()),
        }
        if record.exc_info:
            line["exception"] = self._redact(self.formatException(record.exc_info))
        # json escapes every control character but the Unicode line separators, which some readers split on.
        return json.dumps(line, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def configure_words(transcripts: bool) -> None:
    """Log users' words at INFO (``transcripts``) or at DEBUG."""
    global _words_level
    _words_level = logging.INFO if transcripts else logging.DEBUG


def configure(level: str, fmt: str = "text", secrets: Iterable[str] = (), transcripts: bool = False) -> None:
    """Send every logger's records (uvicorn's too: run it with ``log_config=None``) to stderr."""
    configure_words(transcripts)
    redact = Redactor(secrets)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(SessionFilter())
    handler.addFilter(SessionRateLimit())
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(library_level(level))
    logging.getLogger(PROJECT_LOGGER).setLevel(level.upper())


def library_level(level: str) -> int:
    """The level for other libraries' loggers at ``level``: INFO at most. At DEBUG uvicorn logs every
    WebSocket frame, 100 a second a session, which spends the session's line budget and drops the project's
    own debug lines."""
    return max(logging.getLevelName(level.upper()), logging.INFO)
