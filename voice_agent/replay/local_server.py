"""Start `voice-agent serve` on a free loopback port and wait until it is ready.

Shared by the benchmark and eval scripts and the end-to-end tests, which all
need a real server process of their own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

# Benchmarks and tests measure the server under the load they make: it admits every session they open
# (no admission by measured load, docs/operations.md) unless their own arguments, which come after it, say so.
ADMIT_EVERY_SESSION = ("--capacity-target", "0", "--latency-budget-ms", "0")


class ServerNotReady(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(base_url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerNotReady(f"the server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(base_url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise ServerNotReady(f"the server was not ready after {timeout:.0f} s")


def stop(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM (a graceful drain), then SIGKILL past ``timeout``."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LocalServer:
    """A server process; ``with LocalServer(...) as server:`` stops it in every case."""

    def __init__(
        self,
        serve_args: list[str] | tuple[str, ...],
        log: IO[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready_timeout: float = 300.0,
    ):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        self.command = [
            sys.executable,
            "-m",
            "voice_agent",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *ADMIT_EVERY_SESSION,
            *serve_args,
        ]
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd
        )
        try:
            wait_ready(self.base_url, self.process, ready_timeout)
        except ServerNotReady:
            self.stop()
            raise

    def stop(self, timeout: float = 30.0) -> None:
        stop(self.process, timeout)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
