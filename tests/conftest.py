"""Shared fixtures: a real server process with the real default models."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(base_url: str, process: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(base_url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError("server did not become ready")


def start_server(*extra_args: str, env: dict[str, str] | None = None, ready_timeout: float = 180.0):
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"server-{port}.log"
    log_file = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "voice_agent", "serve", "--port", str(port), *extra_args],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base_url, process, ready_timeout)
    except Exception:
        process.kill()
        log_file.close()
        raise RuntimeError(f"server failed to start; see {log_path}:\n{log_path.read_text()[-3000:]}")
    return process, base_url, log_file


def stop_server(process: subprocess.Popen, log_file) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
    log_file.close()


@pytest.fixture(scope="session")
def server():
    """Base HTTP URL of a real `voice-agent serve` process with the default models.

    Greedy decoding makes the answers repeatable, so a test that needs a long
    answer (to interrupt it) always gets one.
    """
    process, base_url, log_file = start_server("--llm-temperature", "0")
    yield base_url
    stop_server(process, log_file)


@pytest.fixture(scope="session")
def ws_url(server: str) -> str:
    return server.replace("http://", "ws://") + "/ws"
