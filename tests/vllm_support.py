"""Helpers for the tests against real vLLM on CPU (.venv-vllm, built by scripts/setup-vllm)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from tests.conftest import ARTIFACTS, ROOT, free_port
from tests.speech import silence, speech
from tests.wsclient import NativeClient
from voice_agent.topology import VLLM_ENV, VLLM_PYTHON, vllm_serve_command

GREEDY = ("--llm-temperature", "0")
DTYPE = "float32"  # as vllm_serve_command's, for the same reason
ENGINE_ARGS = ("--llm-dtype", DTYPE, "--llm-enforce-eager", *GREEDY)


def require_vllm() -> None:
    """Skip without .venv-vllm, unless scripts/test asked for the vLLM tests (then fail)."""
    if VLLM_PYTHON.exists():
        return
    message = f"{VLLM_PYTHON} is missing: run scripts/setup-vllm"
    if os.environ.get("VOICE_AGENT_REQUIRE_VLLM") == "1":
        pytest.fail(message)
    pytest.skip(message)


def start_vllm_serve(timeout: float = 600.0):
    """A real `vllm serve` (the OpenAI-compatible server) on loopback; returns (process, base URL, log file)."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"vllm-serve-{port}.log"
    log_file = open(log_path, "w")
    process = subprocess.Popen(
        # Tool calls as a deployment would serve them; a named tool_choice needs a parser set.
        [*vllm_serve_command(port), "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env={**os.environ, **VLLM_ENV},
        cwd=ROOT,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
                if response.status == 200:
                    return process, base_url, log_file
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    log_file.close()
    raise RuntimeError(f"vllm serve did not start; see {log_path}:\n{log_path.read_text()[-3000:]}")


def metric(base_url: str, name: str) -> float:
    """One gauge or counter from the server's Prometheus /metrics, summed over its labels."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    if not values:
        raise AssertionError(f"{name} is not in {base_url}/metrics")
    return sum(values)


async def spoken_turn(ws_url: str) -> tuple[dict, str]:
    """One full voice turn over a real WebSocket: a spoken question in, a spoken answer out.

    Returns the turn's metrics and the agent's final transcript.
    """
    client = await NativeClient.connect(ws_url)
    try:
        await client.stream(np.concatenate([speech("What is the capital of France?"), silence(0.3)]))
        streaming = asyncio.create_task(client.stream(silence(8.0)))
        final = await client.wait_for(
            lambda m: m.get("type") == "transcript" and m["role"] == "user" and m["final"], 30
        )
        assert "france" in final["text"].lower(), final
        metrics = await client.wait_for(lambda m: m.get("type") == "metrics", 30)
        agent = await client.wait_for(
            lambda m: m.get("type") == "transcript" and m["role"] == "agent" and m["final"], 60
        )
        await streaming
        assert not client.json("error"), client.json("error")
        assert agent["text"].strip()
        audio = np.concatenate([np.frombuffer(r.message, "<i2") for r in client.audio_messages()])
        assert np.abs(audio).max() > 1000  # speech, not silence
        return metrics, agent["text"]
    finally:
        await client.close()
