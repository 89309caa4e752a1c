"""Scale-out, end to end: HAProxy in front of two real gateways that share one LLM (voice_agent/topology.py).

Through the balancer: calls spread over both gateways; one gateway drained
with SIGTERM while calls run (its answer in flight finishes, then 1001; new
calls go to the other; none fails), restarted and taken back; the LLM server
gone for a moment (the apology, then answers again). The LLM is the embedded
model behind the stand-in OpenAI-compatible endpoint, which restarts in
seconds (`vllm serve` takes a minute on this CPU);
VOICE_AGENT_TOPOLOGY_LLM=vllm runs the test against `vllm serve` from
.venv-vllm instead, and scripts/topology runs the same deployment with
`--llm vllm` or any endpoint.

Needs Debian's haproxy (scripts/test installs it when run as root): without
it the test skips outside CI and fails in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import ARTIFACTS
from tests.speech import silence, speech
from tests.wsclient import NativeClient
from voice_agent.session import APOLOGY
from voice_agent.topology import GATEWAY_HEADER, Topology, haproxy_config

LONG_QUESTION = "Tell me a story about a dragon who learns to fly."
# Short answers keep the calls quick; greedy decoding keeps them the same from run to run. Every call
# comes from this machine's address, which HAProxy forwards: no per-address limits. Calls wait quietly
# while the others are checked: no idle timeout. Admission by load is off: on a shared 2-core machine
# two gateways and the LLM may well pass the latency budget, and a gateway that says so is taken out of
# rotation (tests/test_capacity.py tests that); this test is about the rest.
GATEWAY_ARGS = (
    *("--llm-temperature", "0", "--llm-max-tokens", "40"),
    *("--shutdown-grace-s", "30", "--idle-timeout-s", "0"),
    *("--max-sessions-per-client", "0", "--max-connections-per-s", "0"),
    *("--capacity-target", "0", "--latency-budget-ms", "0"),
)

# One llama.cpp instance: the stand-in starts sooner, and it restarts in the middle of the test.
STANDIN_ARGS = ("--llm-instances", "1", "--llm-temperature", "0")


def test_the_haproxy_config_checks_readyz_and_keeps_websockets_open(tmp_path):
    config = haproxy_config(8080, [8101, 8102], 8404)
    assert "option httpchk GET /readyz" in config and "http-check expect status 200" in config
    assert "timeout tunnel 1h" in config and "balance leastconn" in config
    assert "server gw1 127.0.0.1:8101 check" in config and "server gw2 127.0.0.1:8102 check" in config
    haproxy = shutil.which("haproxy")
    if haproxy is not None:  # the e2e test below runs it; here only its own check, when it is installed
        path = tmp_path / "haproxy.cfg"
        path.write_text(config)
        assert subprocess.run([haproxy, "-c", "-q", "-f", str(path)]).returncode == 0


@pytest.fixture(scope="module")
def topology():
    if shutil.which("haproxy") is None:
        reason = "Debian's haproxy is not installed (apt-get install haproxy)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the topology test (scripts/test installs it)")
        pytest.skip(reason)
    llm = os.environ.get("VOICE_AGENT_TOPOLOGY_LLM", "standin")  # vllm: `vllm serve` (minutes more)
    folder = ARTIFACTS / "topology"
    with Topology(folder, gateways=2, llm=llm, serve_args=GATEWAY_ARGS, llm_args=STANDIN_ARGS) as topology:
        yield topology


class Call:
    """One client of the balancer; ``gateway`` is the one HAProxy gave it."""

    def __init__(self, client: NativeClient):
        self.client = client
        self.gateway = client.ws.response.headers[GATEWAY_HEADER]

    @classmethod
    async def open(cls, url: str) -> Call:
        return cls(await NativeClient.connect(url))

    async def ask(self, text: str) -> None:
        await self.client.ws.send(json.dumps({"type": "text", "text": text}))

    async def answer(self, after: int = 0, timeout: float = 60.0) -> str:
        """The agent's next final words, past the first ``after`` of them."""
        await self.client.wait_for(lambda m: len(self.finals()) > after, timeout)
        return self.finals()[after]

    async def speaking(self, answers: int, timeout: float = 60.0) -> None:
        """Until the agent has started speaking its ``answers``-th answer (each start has its metrics event)."""
        await self.client.wait_for(lambda m: len(self.client.json("metrics")) >= answers, timeout)

    def finals(self) -> list[str]:
        return [m["text"] for m in self.client.json("transcript") if m["role"] == "agent" and m["final"]]

    async def closed(self, timeout: float) -> tuple[int | None, str]:
        assert self.client._reader is not None
        await asyncio.wait_for(self.client._reader, timeout)
        return self.client.ws.close_code, self.client.ws.close_reason

    @property
    def open_now(self) -> bool:
        return self.client._reader is not None and not self.client._reader.done()

    async def close(self) -> None:
        await self.client.close()


async def answered(url: str, question: str) -> Call:
    """A new call that asks ``question`` and hears the start of its answer.

    A call refused with 1013 (try again later) calls again, as the browser client does: a gateway takes a
    connection that reaches it in the very instant of its SIGTERM, and refuses it so (docs/deployment.md).
    """
    for _ in range(3):
        try:
            call = await Call.open(url)
            await call.ask(question)
        except ConnectionClosed as refused:  # closed before the session began: refused in the same way
            assert refused.rcvd is not None and refused.rcvd.code == 1013, refused
            continue
        deadline = time.monotonic() + 60
        while not call.client.json("metrics") and call.open_now and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if call.client.json("metrics"):
            return call
        assert call.client.ws.close_code == 1013, call.client.json()
    raise AssertionError("refused three times")


@pytest.mark.e2e
async def test_calls_spread_drain_restart_and_outlive_the_llm_going_away(topology: Topology):
    url = topology.ws_url

    # Spread: four calls at once, two on each gateway (least connections first); a spoken one among them.
    calls = [await Call.open(url) for _ in range(4)]
    assert Counter(c.gateway for c in calls) == {"gw1": 2, "gw2": 2}
    await calls[0].client.stream(np.concatenate([speech("What is the capital of France?"), silence(1.0)]))
    for call in calls[1:]:
        await call.ask("Say hello.")
    await asyncio.gather(*(call.speaking(1) for call in calls))
    assert not any(call.client.json("error") for call in calls)

    # Drain gw1 while one of its calls is answering and the other is between turns.
    on_gw1 = [c for c in calls if c.gateway == "gw1"]
    on_gw2 = [c for c in calls if c.gateway == "gw2"]
    speaking, between_turns = on_gw1
    await speaking.answer()  # its first answer, to the end
    await speaking.ask(LONG_QUESTION)
    await speaking.speaking(2)
    gateway = topology.gateways[0]
    assert gateway is not None
    gateway.send_signal(signal.SIGTERM)
    # Three new calls at once, before HAProxy's checks can have noticed: all go to gw2 and are answered.
    during = await asyncio.gather(*(answered(url, "Say hello.") for _ in range(3)))
    assert [c.gateway for c in during] == ["gw2"] * 3
    # The call between turns goes at once; the one speaking finishes its answer first; both with 1001.
    assert await between_turns.closed(10) == (1001, "server is shutting down")
    assert await speaking.closed(60) == (1001, "server is shutting down")
    assert len(speaking.finals()) == 2 and speaking.finals()[1], speaking.client.json()
    assert not speaking.client.json("error")
    assert await asyncio.to_thread(gateway.wait, 30) == 0
    topology.gateways[0] = None

    topology.start_gateway(0, wait=False)  # the restart, loading while the rest of the drain is checked
    # gw2's calls never noticed: they answer again.
    for call in on_gw2:
        await call.ask("Say goodbye.")
    await asyncio.gather(*(call.speaking(2) for call in on_gw2))
    # A caller cut off between turns calls again: the balancer puts it through to gw2.
    again = await answered(url, "Say hello.")
    assert again.gateway == "gw2"

    # gw1 restarted: HAProxy takes it back, and new calls go to it (it has the fewest).
    await asyncio.to_thread(topology.wait_gateway, 0)
    await asyncio.to_thread(topology.wait_balancer, 0, True)
    back = await answered(url, "Say hello.")
    assert back.gateway == "gw1"
    await back.answer()

    # The LLM server goes away: a turn gets the apology and the call goes on; once it is back, answers again.
    await asyncio.to_thread(topology.stop_llm)
    await back.ask("What is two plus two?")
    await back.client.wait_for(lambda m: m.get("type") == "error", 30)
    restarting = asyncio.create_task(asyncio.to_thread(topology.start_llm))
    await back.client.wait_for(lambda m: APOLOGY in back.finals(), 30)
    assert [e["code"] for e in back.client.json("error")] == ["reply_failed"]
    await restarting
    said = len(back.finals())
    await back.ask("What is two plus two?")
    assert await back.answer(after=said) not in ("", APOLOGY)
    assert back.open_now and all(c.open_now for c in [*on_gw2, *during, again])

    for call in [*on_gw2, *during, again, back]:
        await call.close()
