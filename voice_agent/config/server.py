"""The server's own settings: where it listens, how it shuts down, what it logs."""

from __future__ import annotations

from dataclasses import dataclass

from .option import option


@dataclass(frozen=True)
class ServerSettings:
    """Where the server listens and what it logs."""

    host: str = option("127.0.0.1", "Interface to listen on.", "server")
    port: int = option(8000, "TCP port to listen on.", "server")
    log_level: str = option("info", "Log level.", "server", ("debug", "info", "warning", "error"))


@dataclass(frozen=True)
class OperationsSettings:
    """Shutdown and logging."""

    shutdown_grace_s: float = option(
        20.0,
        "On SIGTERM or Ctrl-C: how long live sessions may finish the answer they are giving "
        "before they are closed with 1001.",
        "server",
    )
    log_format: str = option("text", "Log line format.", "server", ("text", "json"))
    log_transcripts: bool = option(
        False,
        "Log what users said (transcripts, typed text) at INFO; off: only at DEBUG (see docs/operations.md).",
        "server",
    )
