"""Log lines: users' words only when the operator asks, and no line a client can forge."""

from __future__ import annotations

import logging

import pytest

from voice_agent import log as logs
from voice_agent.printable import escape_controls, printable


@pytest.fixture
def restore_logging():
    root, project = logging.getLogger(), logging.getLogger(logs.PROJECT_LOGGER)
    handlers, level, project_level = list(root.handlers), root.level, project.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    project.setLevel(project_level)
    logs.configure_words(False)


def test_users_words_are_logged_only_at_debug_unless_asked(capsys, restore_logging):
    said = logging.getLogger("voice_agent.session")
    logs.configure("info")
    said.log(logs.words_level(), "the user said %r", "my card number")
    assert "my card number" not in capsys.readouterr().err
    logs.configure("debug")
    said.log(logs.words_level(), "the user said %r", "my card number")
    assert "my card number" in capsys.readouterr().err
    logs.configure("info", transcripts=True)
    said.log(logs.words_level(), "the user said %r", "my card number")
    assert "my card number" in capsys.readouterr().err


def test_debug_is_the_projects_own_lines_not_every_librarys(capsys, restore_logging):
    logs.configure("debug")
    logging.getLogger("voice_agent.reply.pipeline").debug("answer paused")
    logging.getLogger("uvicorn.error").debug("< BINARY 00 00")
    logging.getLogger("uvicorn.error").info("Uvicorn running")
    err = capsys.readouterr().err
    assert "answer paused" in err and "Uvicorn running" in err and "BINARY" not in err


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_value_with_newlines_stays_on_its_line(capsys, restore_logging, fmt):
    logs.configure("info", fmt)
    logging.getLogger("voice_agent.server.app").warning("got %s", "x\n2026-01-01 ERROR forged\x1b[2J\u2028")
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err and "\u2028" not in err


def test_a_traceback_keeps_its_lines(capsys, restore_logging):
    logs.configure("info")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("voice_agent.server.app").exception("failed")
    assert "Traceback (most recent call last):\n" in capsys.readouterr().err


def test_printable_bounds_and_escapes_any_value():
    assert printable("a\nb") == "'a\\nb'"
    assert len(printable("x" * 10_000)) < 80
    assert len(printable([[["deep"] * 100] * 100])) < 80
    huge = int("9" * 4000)
    assert printable(huge).startswith("999")
    assert escape_controls("\x00\x7f\x9b\ud800") == "\\x00\\x7f\\x9b\\ud800"


def test_lines_outside_sessions_are_limited_too():
    """A flood of handshakes refused for the token logs outside any session: it must not fill the disk."""
    now = [0.0]
    limit = logs.SessionRateLimit(clock=lambda: now[0], outside_rate=1.0, outside_burst=2)

    def passes(message: str, level: int = logging.WARNING) -> str | None:
        """The line as written, or None if it was dropped."""
        record = logging.LogRecord("voice_agent.server.app", level, __file__, 1, message, None, None)
        record.session = logs.NO_SESSION
        return record.getMessage() if limit.filter(record) else None

    assert [passes(f"refused {i}") is not None for i in range(5)] == [True, True, False, False, False]
    assert passes("a failure", logging.ERROR) == "a failure"
    now[0] += 1.0
    assert passes("later") == "later (3 earlier line(s) outside sessions dropped: too many)"


def test_a_call_sites_tracebacks_are_limited_and_the_rest_are_one_line_each(caplog, monkeypatch):
    """A client can fail an answer once a message: each failure is logged, a few with their tracebacks."""
    now = [0.0]
    monkeypatch.setattr(logs, "_tracebacks", logs.TracebackLimit(rate=1 / 60, burst=3, clock=lambda: now[0]))
    failing = logging.getLogger("voice_agent.session")

    def fail(n: int) -> None:
        try:
            raise ValueError(f"bad input {n}")
        except ValueError:
            logs.log_exception(failing, "session %s: reply failed", "s1")

    with caplog.at_level(logging.INFO):
        for n in range(15):
            fail(n)
    with_traceback = [r for r in caplog.records if r.exc_info]
    assert len(with_traceback) == 3 and all(r.levelno == logging.ERROR for r in with_traceback)
    rest = [r for r in caplog.records if not r.exc_info]
    assert len(rest) == 12 and all(r.levelno == logging.WARNING for r in rest)  # under the session's line limit
    assert rest[0].getMessage() == "session s1: reply failed (ValueError: bad input 3; traceback left out: too many)"
    # The allowance refills with time, and the next traceback says how many went without.
    now[0] += 60
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fail(15)
    [record] = caplog.records
    assert record.exc_info and "(12 more like it without a traceback since the last one)" in record.getMessage()


def test_query_strings_are_redacted_as_the_server_decodes_them():
    """A token sent as ``?%74oken=`` is a token: uvicorn logs the query as sent, the server reads it decoded."""
    redact = logs.Redactor(["s3cret-Token"])
    assert redact('"WebSocket /ws?%74oken=guess-1" [accepted]') == '"WebSocket /ws?%74oken=***" [accepted]'
    assert redact("/ws?lang=en&%61ccess_%74oken=guess-2&x=1") == "/ws?lang=en&%61ccess_%74oken=***&x=1"
    assert redact("/ws?TOKEN=guess-3") == "/ws?TOKEN=***"
    # The secret itself under any parameter name, percent-encoded: it never shows, even encoded.
    line = redact("/ws?key=%73%33cret-%54oken&lang=en")
    assert line == "/ws?key=***&lang=en"
    assert redact("what? nothing") == "what? nothing" and redact("/ws?lang=en") == "/ws?lang=en"
