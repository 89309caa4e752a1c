"""The WebSocket close codes this server sends (RFC 6455 section 7.4.1, and the IANA registry for 1013)."""

from __future__ import annotations

import enum


class CloseCode(enum.IntEnum):
    NORMAL_CLOSURE = 1000  # the session is over: idle timeout, session time limit, the agent ended the call
    GOING_AWAY = 1001  # the server is shutting down
    POLICY_VIOLATION = 1008  # the client broke a rule: too many messages, not reading, a wrong token
    INTERNAL_ERROR = 1011  # a bug in this session; the server and other sessions go on
    TRY_AGAIN_LATER = 1013  # the server is full, still loading, or shutting down
