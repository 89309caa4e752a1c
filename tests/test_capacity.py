"""Admission by measured load: the capacity model with a hand-driven clock, and its wiring into the server."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.conftest import start_server, stop_server
from tests.speech import silence, speech
from tests.wsclient import NativeClient
from voice_agent.config import Settings
from voice_agent.engines.stt_queue import STTQueue
from voice_agent.server.app import create_app
from voice_agent.server.capacity import MIN_SESSION_S, OVER_BUDGET, OVERLOADED, CapacityModel
from voice_agent.server.limits import Refused, SessionRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Machine:
    """A process whose CPU counter grows by ``idle`` plus ``per_session`` for each live session, each second."""

    def __init__(self, model: CapacityModel, clock: Clock, idle: float, per_session: float):
        self.model, self.clock, self.idle, self.per_session = model, clock, idle, per_session
        self.cpu = 0.0
        model.sample(self.cpu, 0)

    def run(self, seconds: int, sessions: int) -> None:
        for _ in range(seconds):
            self.clock.now += 1.0
            self.cpu += self.idle + self.per_session * sessions
            self.model.sample(self.cpu, sessions)


def unused_engines() -> Any:
    """Refusals happen before a session starts: no model is ever used, and only the STT queue is watched."""
    return SimpleNamespace(stt_queue=STTQueue(lambda: cast(Any, None)), llm=None, tts=None)


def model(clock: Clock, **kwargs: Any) -> CapacityModel:
    options: dict[str, Any] = {"cores": 2, "target": 0.8, "budget_s": 1.0, "window_s": 60.0} | kwargs
    return CapacityModel(clock=clock, **options)


def test_nothing_is_known_until_enough_session_time_is_measured():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.05, per_session=0.3)
    machine.run(10, 0)
    machine.run(9, 2)  # 18 session-seconds: under the 20 needed
    verdict = capacity.verdict(2)
    assert verdict.reason is None and verdict.capacity is None and verdict.session_cost is None
    assert "--max-sessions" in verdict.detail
    machine.run(2, 2)
    assert capacity.session_cost == pytest.approx(0.3)


def test_the_cost_of_a_session_is_its_cpu_beyond_the_idle_process():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.05, per_session=0.3)
    machine.run(10, 0)
    machine.run(20, 2)
    assert capacity.session_cost == pytest.approx(0.3)
    # (0.8 x 2 cores - 0.05 idle) / 0.3 = 5.17 sessions
    assert capacity.capacity() == 5
    assert capacity.verdict(4).reason is None  # the fifth: (0.05 + 5 x 0.3) / 2 = 77.5 %
    refused = capacity.verdict(5)  # a sixth: 92.5 %
    assert refused.reason == OVERLOADED
    assert refused.predicted_utilisation == pytest.approx(0.925)
    assert refused.close_reason == "overloaded; retry after 5 s"
    assert refused.as_json()["retry_after_s"] == 5 and refused.as_json()["ready"] is False


def test_the_default_target_admits_four_sessions_from_a_lone_sessions_cost_and_stops_before_the_knee():
    """Measured on the 2-core machine (docs/results/capacity.md): a lone session of the benchmark conversation
    costs about 0.29 core-s/s and one of 6 about 0.24, and 8 sessions stay within the 1 s budget."""
    clock = Clock()
    capacity = model(clock, target=Settings().capacity_target)
    machine = Machine(capacity, clock, idle=0.006, per_session=0.29)
    machine.run(60, 1)
    assert capacity.verdict(3).reason is None  # the fourth
    assert capacity.capacity() == 5
    machine.per_session = 0.24
    machine.run(61, 6)
    assert capacity.verdict(5).reason is None
    assert capacity.verdict(6).reason == OVERLOADED  # a seventh: short of the 8 measured within budget


def test_a_measured_cost_outlives_the_window_while_the_server_is_idle():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.0, per_session=0.5)
    machine.run(30, 1)
    machine.run(300, 0)  # five idle minutes: the window holds no session at all
    assert capacity.session_cost == pytest.approx(0.5)
    assert capacity.verdict(2).reason is None  # a third: 3 x 0.5 of 2 cores, 75 %
    assert capacity.verdict(3).reason == OVERLOADED  # a fourth: 100 %


def test_a_new_cost_replaces_the_old_as_the_window_moves():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.0, per_session=0.5)
    machine.run(60, 1)
    machine.per_session = 0.2  # cheaper calls: shorter answers, say
    machine.run(30, 1)
    assert capacity.session_cost == pytest.approx(0.35)  # the window holds both halves
    machine.run(31, 1)
    assert capacity.session_cost == pytest.approx(0.2)
    assert capacity.capacity() == 8


def test_sessions_starved_of_cpu_do_not_look_cheap_while_their_turns_are_late():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.0, per_session=0.3)
    machine.run(60, 3)
    machine.per_session = 0.1  # six sessions on a machine that has 0.6 cores for them
    for _ in range(120):  # six sessions: a turn about every second, each late
        machine.run(1, 6)
        capacity.observe_turn(2.5)
    assert capacity.session_cost > 0.28  # it fell only until three late turns were seen
    machine.per_session = 0.4  # dearer still: a rise counts at once, late or not
    machine.run(61, 6)
    assert capacity.session_cost == pytest.approx(0.4)
    assert capacity.verdict(6).reason == OVERLOADED


def test_a_slow_median_refuses_even_when_the_cpu_looks_free():
    clock = Clock()
    capacity = model(clock)
    machine = Machine(capacity, clock, idle=0.0, per_session=0.1)
    machine.run(30, 1)
    for v2v in (0.8, 1.3, 1.4):
        capacity.observe_turn(v2v)
    verdict = capacity.verdict(1)
    assert verdict.reason == OVER_BUDGET and verdict.voice_to_voice_p50_s == pytest.approx(1.3)
    assert "1300 ms" in verdict.detail and "1000 ms budget" in verdict.detail
    clock.now += 61  # the slow turns leave the window
    assert capacity.verdict(1).reason is None


def test_a_server_with_no_session_always_takes_one():
    clock = Clock()
    capacity = model(clock, cores=1)
    Machine(capacity, clock, idle=0.0, per_session=2.0).run(30, 1)  # one session needs two cores
    for _ in range(5):
        capacity.observe_turn(3.0)
    assert capacity.verdict(0).reason is None and capacity.capacity() == 0
    assert capacity.verdict(1).reason == OVERLOADED


def test_two_turns_are_too_few_to_judge_the_latency():
    capacity = model(Clock())
    capacity.observe_turn(3.0)
    capacity.observe_turn(3.0)
    assert capacity.verdict(0).reason is None


def test_zero_target_and_budget_never_refuse_but_still_measure():
    clock = Clock()
    capacity = model(clock, target=0.0, budget_s=0.0)
    machine = Machine(capacity, clock, idle=0.0, per_session=1.5)
    machine.run(30, 2)
    for _ in range(5):
        capacity.observe_turn(5.0)
    assert capacity.session_cost == pytest.approx(1.5)
    assert capacity.verdict(10).reason is None


def test_a_counter_that_goes_backwards_is_not_counted():
    clock = Clock()
    capacity = model(clock, min_session_s=1.0)
    capacity.sample(100.0, 1)
    clock.now += 1
    capacity.sample(50.0, 1)  # a restarted counter: no interval, no negative cost
    clock.now += 1
    capacity.sample(50.5, 1)
    assert capacity.session_cost == pytest.approx(0.5)


def test_the_registry_refuses_what_the_model_refuses():
    clock = Clock()
    capacity = model(clock, cores=1, target=0.5)
    Machine(capacity, clock, idle=0.0, per_session=0.3).run(30, 1)
    registry = SessionRegistry(maximum=8, clock=clock)
    registry.capacity = capacity
    first = registry.open("a")
    with pytest.raises(Refused) as refused:
        registry.open("b")
    assert refused.value.kind == OVERLOADED and str(refused.value) == "overloaded; retry after 5 s"
    first.release()
    registry.open("b").release()


def test_readyz_and_the_websocket_refuse_past_capacity_with_a_reason_and_a_metric():
    settings = Settings(capacity_target=0.5, cpu_cores=1, allowed_hosts=("testserver",))  # the test client's Host
    app = create_app(settings, engines=unused_engines())
    runtime = app.state.runtime
    clock = Clock()
    runtime.capacity = runtime.sessions.capacity = model(clock, cores=1, target=0.5)
    Machine(runtime.capacity, clock, idle=0.0, per_session=0.3).run(30, 1)
    with TestClient(app) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["capacity"] == 1

        live = runtime.sessions.open(None)  # a session is live: a second would need 60 % of the core
        busy = client.get("/readyz")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
        assert busy.json()["reason"] == OVERLOADED and "60%" in busy.json()["detail"]
        with client.websocket_connect("/ws") as ws, pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert (closed.value.code, closed.value.reason) == (1013, "overloaded; retry after 5 s")
        metrics = client.get("/metrics").text
        assert 'voice_agent_refused_connections_total{reason="overloaded"} 1.0' in metrics

        live.release()
        assert client.get("/readyz").status_code == 200


def test_readyz_is_not_ready_at_the_fixed_maximum():
    app = create_app(Settings(max_sessions=1, capacity_target=0), engines=unused_engines())
    runtime = app.state.runtime
    with TestClient(app) as client:
        slot = runtime.sessions.open(None)
        full = client.get("/readyz")
        assert full.status_code == 503 and full.json()["reason"] == "full"
        slot.release()
        assert client.get("/readyz").status_code == 200


def readyz(base_url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base_url + "/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.mark.e2e
async def test_a_real_server_measures_what_its_sessions_cost_and_refuses_past_it():
    """Two spoken sessions teach a real server their cost; at a target no session fits, it then says so."""
    process, base_url, log_file = start_server(
        "--capacity-target", "0.001", "--latency-budget-ms", "0", "--llm-max-tokens", "20", "--idle-timeout-s", "0"
    )
    ws_url = base_url.replace("http://", "ws://") + "/ws"
    try:
        status, before = readyz(base_url)
        assert status == 200 and before["session_cost"] is None and before["capacity"] is None
        talk = np.concatenate([speech("What is the capital of France?"), silence(MIN_SESSION_S / 2 + 2)])
        clients = [await NativeClient.connect(ws_url) for _ in range(2)]
        await asyncio.gather(*(client.stream(talk) for client in clients))
        await asyncio.sleep(1.5)  # the next sample
        status, after = readyz(base_url)
        assert status == 503 and after["reason"] == OVERLOADED, after
        assert 0 < after["session_cost"] < 2 and after["capacity"] == 0 and after["retry_after_s"] == 5
        refused = await NativeClient.connect(ws_url, rate=None)
        await asyncio.wait_for(refused._reader, 10)
        assert (refused.ws.close_code, refused.ws.close_reason) == (1013, "overloaded; retry after 5 s")
        assert all(client._reader is not None and not client._reader.done() for client in clients)  # kept
        with urllib.request.urlopen(base_url + "/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert 'voice_agent_refused_connections_total{reason="overloaded"} 1.0' in metrics
        assert "voice_agent_capacity_sessions 0.0" in metrics
        for client in clients:
            await client.close()
    finally:
        stop_server(process, log_file)
