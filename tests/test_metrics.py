"""Prometheus metrics and structured logs: unit tests, then /metrics of a real server after a spoken turn."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.speech import silence, speech
from tests.test_stt_queue import SlowSTT
from tests.wsclient import NativeClient
from voice_agent import log as logs
from voice_agent.engines.stt_queue import STTQueue
from voice_agent.engines.threads import iterate_in_thread
from voice_agent.engines.wait_line import WaitLine
from voice_agent.protocols.events import AgentAudio, Clear, Error, Metrics, Transcript
from voice_agent.server.metrics import ServerMetrics

TURN = {
    "turn": 1,
    "voice_to_voice_ms": 640.0,
    "endpoint_ms": 300.0,
    "stt_final_ms": 120.0,
    "stt_speculative": True,
    "llm_ttft_ms": 90.0,
    "first_chunk_ms": 150.0,
    "tts_ttfa_ms": None,  # a stage that did not happen is skipped, not counted as zero
}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text exposition, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_events_become_turns_histograms_barge_ins_and_errors():
    metrics = ServerMetrics()
    metrics.observe(Metrics(TURN))
    metrics.observe(Metrics({**TURN, "voice_to_voice_ms": 1500.0}))
    metrics.observe(Clear())
    metrics.observe(Error("invalid_json", "x"))
    metrics.observe(Error("invalid_json", "x"))
    metrics.observe(Error("stt_failed", "x"))
    metrics.observe(Transcript("agent", "hi", True))
    metrics.observe(AgentAudio(np.zeros(320, np.float32)))
    got = samples(metrics.render().decode())
    assert got[("voice_agent_turns_total", ())] == 2
    assert got[("voice_agent_voice_to_voice_seconds_count", ())] == 2
    assert got[("voice_agent_voice_to_voice_seconds_sum", ())] == pytest.approx(2.14)
    assert got[("voice_agent_voice_to_voice_seconds_bucket", (("le", "0.7"),))] == 1
    assert got[("voice_agent_voice_to_voice_seconds_bucket", (("le", "1.5"),))] == 2
    assert got[("voice_agent_stage_seconds_count", (("stage", "endpoint"),))] == 2
    assert got[("voice_agent_stage_seconds_sum", (("stage", "llm_ttft"),))] == pytest.approx(0.18)
    assert ("voice_agent_stage_seconds_count", (("stage", "tts_ttfa"),)) not in got
    assert got[("voice_agent_barge_ins_total", ())] == 1
    assert got[("voice_agent_errors_total", (("code", "invalid_json"),))] == 2
    assert got[("voice_agent_errors_total", (("code", "stt_failed"),))] == 1
    assert got[("process_resident_memory_bytes", ())] > 0


def test_active_sessions_go_up_and_down_even_when_a_session_fails():
    metrics = ServerMetrics()
    with metrics.session():
        with pytest.raises(RuntimeError):
            with metrics.session():
                assert metrics.active_sessions._value.get() == 2
                raise RuntimeError("boom")
        assert metrics.active_sessions._value.get() == 1
    got = samples(metrics.render().decode())
    assert got[("voice_agent_active_sessions", ())] == 0
    assert got[("voice_agent_sessions_total", ())] == 2


async def test_event_loop_lag_is_measured_and_a_stall_logged(caplog):
    caplog.set_level(logging.WARNING, logger="voice_agent.server.metrics")
    metrics = ServerMetrics()
    watching = asyncio.create_task(metrics.watch_event_loop())
    await asyncio.sleep(0.05)
    time.sleep(0.4)  # block the loop, as a CPU-bound bug would
    await asyncio.sleep(0.5)
    watching.cancel()
    got = samples(metrics.render().decode())
    assert got[("voice_agent_event_loop_lag_seconds_count", ())] >= 2
    assert got[("voice_agent_event_loop_lag_seconds_sum", ())] >= 0.15
    assert (
        got[("voice_agent_event_loop_lag_seconds_bucket", (("le", "0.1"),))]
        < got[("voice_agent_event_loop_lag_seconds_count", ())]
    )
    [stall] = [r.getMessage() for r in caplog.records if "event loop ran" in r.getMessage()]
    assert int(stall.split()[4]) >= 100, stall


def test_two_apps_in_one_process_keep_their_own_counts():
    first, second = ServerMetrics(), ServerMetrics()
    first.observe(Metrics(TURN))
    assert samples(second.render().decode())[("voice_agent_turns_total", ())] == 0


# Logs.


def capture(fmt: str, secrets=()) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.SessionFilter())
    redact = logs.Redactor(secrets)
    handler.setFormatter(logs.JsonFormatter(redact) if fmt == "json" else logs.TextFormatter(redact))
    logger = logging.getLogger(f"test.{fmt}.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger, stream


async def test_every_line_of_a_session_carries_its_id_even_from_its_tasks():
    logger, stream = capture("json")

    async def connection(name: str) -> str:
        session_id = logs.start_session()
        logger.info("%s connected", name)

        async def stage() -> None:
            await asyncio.sleep(0.01)
            logger.info("%s stage done", name)

        await asyncio.create_task(stage())
        await asyncio.to_thread(logger.info, "%s from a worker thread", name)
        return session_id

    ids = await asyncio.gather(connection("a"), connection("b"))
    logger.info("outside any session")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_message = {line["message"]: line["session"] for line in lines}
    assert ids[0] != ids[1]
    for name, session_id in zip("ab", ids):
        assert by_message[f"{name} connected"] == session_id
        assert by_message[f"{name} stage done"] == session_id
        assert by_message[f"{name} from a worker thread"] == session_id
    assert by_message["outside any session"] == logs.NO_SESSION
    assert all({"time", "level", "logger", "session", "message"} <= line.keys() for line in lines)


def test_secrets_are_redacted_in_text_and_json_lines_and_tracebacks():
    secret = "s3cr3t-Token-value"
    for fmt in ("text", "json"):
        logger, stream = capture(fmt, secrets=[secret, ""])
        logger.info('127.0.0.1:5 - "WebSocket /ws?lang=en&token=%s" [accepted]', "guessed-token")
        logger.info('127.0.0.1:5 - "WebSocket /twilio/%s" 403', "path-token")
        logger.info('127.0.0.1:5 - "POST /twilio/voice HTTP/1.1" 200')
        logger.info("Authorization: Bearer %s", "header-token")
        try:
            raise ValueError(f"bad {secret}")
        except ValueError:
            logger.exception("failed")
        text = stream.getvalue()
        for leaked in (secret, "guessed-token", "path-token", "header-token"):
            assert leaked not in text, (fmt, text)
        assert "lang=en&token=***" in text and "/twilio/***" in text and "/twilio/voice" in text
        assert "ValueError" in text


def scrape(base_url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return samples(response.read().decode())


@pytest.mark.e2e
async def test_metrics_of_a_real_server_follow_a_spoken_turn(server, ws_url):
    before = scrape(server)
    client = await NativeClient.connect(ws_url)
    await client.ws.send("{not json")
    # A question no other test asks: the server is shared, and an answer's short chunks said before come from
    # the phrase cache, not from a Piper thread, so they would count no TTS wait.
    question = "Can you describe the view from the top of the Eiffel Tower?"
    await client.stream(np.concatenate([speech(question), silence(0.3)]))
    streaming = asyncio.create_task(client.stream(silence(5.0)))
    turn = await client.wait_for(lambda m: m.get("type") == "metrics", 20)
    during = scrape(server)
    streaming.cancel()
    await asyncio.gather(streaming, return_exceptions=True)
    await client.close()

    def grew(name: str, labels: tuple = ()) -> float:
        return during.get((name, labels), 0) - before.get((name, labels), 0)

    assert during[("voice_agent_active_sessions", ())] >= 1
    assert grew("voice_agent_sessions_total") >= 1
    assert grew("voice_agent_turns_total") >= 1
    assert grew("voice_agent_voice_to_voice_seconds_count") >= 1
    assert grew("voice_agent_voice_to_voice_seconds_sum") >= turn["voice_to_voice_ms"] / 1000 - 1e-6
    for stage in ("endpoint", "stt_final", "llm_ttft", "first_chunk", "tts_ttfa"):
        assert grew("voice_agent_stage_seconds_count", (("stage", stage),)) >= 1, stage
    assert grew("voice_agent_errors_total", (("code", "invalid_json"),)) >= 1
    assert during[("voice_agent_event_loop_lag_seconds_count", ())] > 0
    assert during[("process_resident_memory_bytes", ())] > 100e6  # the models are in there
    assert grew("voice_agent_stt_queue_wait_seconds_count", (("kind", "final"),)) >= 1
    assert ("voice_agent_stt_queue_depth", ()) in during
    assert grew("voice_agent_llm_queue_wait_seconds_count", (("kind", "answer"),)) >= 1
    assert grew("voice_agent_tts_queue_wait_seconds_count", (("kind", "chunk"),)) >= 1
    assert ("voice_agent_llm_queue_depth", ()) in during and ("voice_agent_tts_queue_depth", ()) in during


def test_a_session_flooding_the_log_is_cut_down_and_the_gap_is_counted():
    now = [0.0]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.SessionFilter())
    handler.addFilter(logs.SessionRateLimit(rate=1.0, burst=3, clock=lambda: now[0]))
    logger = logging.getLogger("test.flood")
    logger.propagate = False
    logger.addHandler(handler)

    async def flood() -> None:
        logs.start_session()
        for index in range(10):
            logger.warning("garbage %d", index)
        logger.error("a real failure")  # errors always get through
        now[0] += 1.0
        logger.warning("later")

    async def quiet() -> None:
        logs.start_session()
        logger.warning("another session is not limited by the first")

    asyncio.run(flood())
    asyncio.run(quiet())
    logger.warning("no session")
    assert stream.getvalue().splitlines() == [
        "garbage 0",
        "garbage 1",
        "garbage 2",
        "a real failure",
        "later (7 earlier line(s) of this session dropped: too many)",
        "another session is not limited by the first",
        "no session",
    ]


async def test_the_stt_queue_reports_waits_by_kind_its_depth_and_what_it_skipped():
    metrics = ServerMetrics()
    queue = STTQueue(lambda: SlowSTT(delay=0.05), workers=1, rate=0)
    stop = metrics.watch_stt(queue)
    session = queue.session()
    first = asyncio.create_task(session.transcribe(np.zeros(10, np.float32)))
    await asyncio.sleep(0.01)
    commits = [asyncio.create_task(session.committed(np.zeros(10, np.float32))) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert samples(metrics.render().decode())[("voice_agent_stt_queue_depth", ())] == 1
    await asyncio.gather(first, *commits)
    stop()
    seen = samples(metrics.render().decode())
    assert seen[("voice_agent_stt_queue_wait_seconds_count", (("kind", "final"),))] == 1
    assert seen[("voice_agent_stt_queue_wait_seconds_count", (("kind", "commit"),))] == 1
    assert seen[("voice_agent_stt_queue_wait_seconds_sum", (("kind", "commit"),))] >= 0.03
    assert seen[("voice_agent_stt_skipped_total", (("kind", "commit"), ("reason", "merged")))] == 2
    assert not queue.watchers


async def test_syntheses_waiting_for_a_thread_are_counted_with_their_wait_and_the_depth():
    metrics = ServerMetrics()
    line = WaitLine("tts")
    stop = metrics.watch_stage(line)
    release = threading.Event()

    def synthesis():
        release.wait(5)
        yield np.zeros(10, np.float32)

    async def chunk() -> list:
        return [audio async for audio in iterate_in_thread(synthesis, executor, line=line, kind="chunk")]

    with ThreadPoolExecutor(1) as executor:
        chunks = [asyncio.create_task(chunk()) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert samples(metrics.render().decode())[("voice_agent_tts_queue_depth", ())] == 1
        release.set()
        await asyncio.gather(*chunks)
    stop()
    seen = samples(metrics.render().decode())
    assert seen[("voice_agent_tts_queue_depth", ())] == 0
    assert seen[("voice_agent_tts_queue_wait_seconds_count", (("kind", "chunk"),))] == 2
    assert seen[("voice_agent_tts_queue_wait_seconds_sum", (("kind", "chunk"),))] >= 0.04  # the second waited
    assert not line.watchers


async def test_a_wait_given_up_leaves_the_depth_and_is_no_wait_that_ended_in_work():
    metrics = ServerMetrics()
    line = WaitLine("llm")
    metrics.watch_stage(line)
    never = asyncio.Event()

    async def take() -> None:
        with line.waiting("answer"):
            await never.wait()

    waiting = asyncio.create_task(take())
    await asyncio.sleep(0.01)
    assert samples(metrics.render().decode())[("voice_agent_llm_queue_depth", ())] == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    seen = samples(metrics.render().decode())
    assert seen[("voice_agent_llm_queue_depth", ())] == 0
    assert ("voice_agent_llm_queue_wait_seconds_count", (("kind", "answer"),)) not in seen
