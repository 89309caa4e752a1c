"""Shared fixtures: a real server process with the real default models."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from voice_agent.replay.local_server import LocalServer, ServerNotReady, free_port, stop  # noqa: F401  (free_port: tests)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def start_server(*extra_args: str, env: dict[str, str] | None = None, ready_timeout: float = 180.0):
    """A real server process: (Popen, base URL, log file). Stop it with :func:`stop_server`."""
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"server-{time.time_ns()}.log"
    log_file = open(log_path, "w")
    try:
        server = LocalServer(extra_args, log_file, env=env, cwd=ROOT, ready_timeout=ready_timeout)
    except ServerNotReady as exc:
        log_file.close()
        raise RuntimeError(f"{exc}; see {log_path}:\n{log_path.read_text()[-3000:]}") from None
    return server.process, server.base_url, log_file


def stop_server(process: subprocess.Popen, log_file) -> None:
    stop(process, timeout=20)
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


# Fixtures that start a real server: a test using one is end-to-end whether or not it says so,
# so that scripts/test --fast never waits for the models to load.
SERVER_FIXTURES = frozenset({"server", "ws_url"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


def pytest_configure(config: pytest.Config) -> None:
    """In the fast tier (scripts/test sets VOICE_AGENT_FAST_TIER=1), loading a real model is an error:
    a test that needs one is marked ``models`` or ``e2e``, and the fast tier stays fast."""
    if os.environ.get("VOICE_AGENT_FAST_TIER") != "1":
        return
    from voice_agent.engines.llm.llamacpp import LlamaCppBackend
    from voice_agent.engines.stt import WhisperSTT
    from voice_agent.engines.tts import PiperTTS
    from voice_agent.engines.vad import SileroVAD

    for engine in (SileroVAD, WhisperSTT, LlamaCppBackend, PiperTTS):

        def refuse(self, *args, _name: str = engine.__name__, **kwargs) -> None:
            raise RuntimeError(f"the fast tier loads no real model ({_name}): mark the test `models` or `e2e`")

        engine.__init__ = refuse  # type: ignore[method-assign]
