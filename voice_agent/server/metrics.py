"""Prometheus metrics of one server process, served at ``GET /metrics``.

Sessions are observed through the events they emit (a turn's ``Metrics``, an
``Error``, the ``Clear`` of an interruption), so no session code knows about
Prometheus. Each app gets its own registry: several servers in one process,
as in tests, never mix their counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from ..engines.wait_line import WaitLine
from ..protocols.events import Clear, Error, Metrics, OutputEvent

if TYPE_CHECKING:
    from ..engines.loader import Engines
    from ..engines.stt_queue import Kind, STTQueue

log = logging.getLogger(__name__)

# The classic text format, which generate_latest writes for these names and every Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LAG_PROBE_S = 0.25
# A lag this long is logged: a stall of the loop delays every session's audio, and its barge-in pause with it.
STALL_LOG_S = 0.1

# The per-turn figures of a Metrics event that are stages of the answer, by their label.
STAGES = {
    "endpoint": "endpoint_ms",
    "stt_final": "stt_final_ms",
    "llm_ttft": "llm_ttft_ms",
    "first_chunk": "first_chunk_ms",
    "tts_ttfa": "tts_ttfa_ms",
}


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, CPU seconds, open fds
        self.active_sessions = Gauge("voice_agent_active_sessions", "Sessions connected now.", registry=r)
        self.sessions = Counter("voice_agent_sessions", "Sessions started.", registry=r)
        self.refused = Counter(
            "voice_agent_refused_connections",
            "WebSocket connections refused, by reason.",
            ["reason"],
            registry=r,
        )
        self.turns = Counter("voice_agent_turns", "Turns answered (the agent started speaking).", registry=r)
        self.voice_to_voice = Histogram(
            "voice_agent_voice_to_voice_seconds",
            "From the end of the user's speech to the agent's first audio, measured at the server.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stages = Histogram(
            "voice_agent_stage_seconds",
            "Per-turn stage latency: endpoint (turn detection), stt_final, llm_ttft, first_chunk, tts_ttfa.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.barge_ins = Counter(
            "voice_agent_barge_ins",
            "Answers the user interrupted (by speech or typed text) after the agent began speaking.",
            registry=r,
        )
        self.errors = Counter(
            "voice_agent_errors",
            "Errors by code: those reported to clients, and connections closed for cause.",
            ["code"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "voice_agent_event_loop_lag_seconds",
            f"How late the event loop ran a {LAG_PROBE_S} s timer: time the loop was blocked or saturated.",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.session_cost = Gauge(
            "voice_agent_session_cpu_cost",
            "Measured CPU cost of one session: core-seconds per second of conversation (0 before any is measured).",
            registry=r,
        )
        self.capacity = Gauge(
            "voice_agent_capacity_sessions",
            "Sessions that fit within --capacity-target at the measured cost (-1 before any is measured).",
            registry=r,
        )
        self.capacity.set(-1)
        # Told each turn's voice-to-voice, in seconds: the capacity model judges the latency budget by it.
        self.on_voice_to_voice: Callable[[float], None] | None = None
        r.register(_ReportsDropped())

        self.stt_wait = Histogram(
            "voice_agent_stt_queue_wait_seconds",
            "How long a transcription waited for a Whisper worker, by kind: final, partial, commit, check.",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stt_depth = Gauge(
            "voice_agent_stt_queue_depth", "Transcriptions waiting for a Whisper worker.", registry=r
        )
        self.stt_skips = Counter(
            "voice_agent_stt_skipped",
            "Transcriptions asked for that never ran, by kind and reason: over_budget, queue_deep, replaced "
            "(by the session's newer request), merged (a commit into the next), cancelled.",
            ["kind", "reason"],
            registry=r,
        )

        self.stage_waits = {
            "llm": Histogram(
                "voice_agent_llm_queue_wait_seconds",
                "How long LLM work waited for a llama.cpp instance, by kind: answer, prefill (an evaluation "
                "ahead of an answer: the history between turns, the end-of-turn reading), reading (an "
                "end-of-turn reading on the reader's context, while every instance answers).",
                ["kind"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            ),
            "tts": Histogram(
                "voice_agent_tts_queue_wait_seconds",
                "How long a synthesis waited for a Piper thread, by kind: chunk (of an answer).",
                ["kind"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            ),
        }
        self.stage_depths = {
            "llm": Gauge("voice_agent_llm_queue_depth", "LLM work waiting for a llama.cpp instance.", registry=r),
            "tts": Gauge("voice_agent_tts_queue_depth", "Syntheses waiting for a Piper thread.", registry=r),
        }

    def watch_engines(self, engines: Engines) -> Callable[[], None]:
        """Count what the engines' queues do from now on: Whisper's, and the LLM's and Piper's where they
        queue here (a remote LLM server queues on its own side); returns what stops it."""
        stops = [self.watch_stt(engines.stt_queue)]
        for engine in (engines.llm, engines.tts):
            line = getattr(engine, "wait_line", None)
            if isinstance(line, WaitLine) and line.stage in self.stage_waits:
                stops.append(self.watch_stage(line))

        def stop_all() -> None:
            for stop in stops:
                stop()

        return stop_all

    def watch_stage(self, line: WaitLine) -> Callable[[], None]:
        """Count the waits of ``line`` (its stage: llm or tts) from now on; returns what stops it."""
        line.watchers.append(self)
        self.stage_depths[line.stage].set_function(line.depth)
        return lambda: line.watchers.remove(self)

    def stage_started(self, stage: str, kind: str, waited_s: float) -> None:
        self.stage_waits[stage].labels(kind).observe(waited_s)

    def watch_stt(self, queue: STTQueue) -> Callable[[], None]:
        """Count what ``queue`` does from now on; returns what stops it."""
        queue.watchers.append(self)
        self.stt_depth.set_function(queue.depth)
        return lambda: queue.watchers.remove(self)

    def stt_started(self, kind: Kind, waited_s: float) -> None:
        self.stt_wait.labels(kind.value).observe(waited_s)

    def stt_skipped(self, kind: Kind, reason: str) -> None:
        self.stt_skips.labels(kind.value, reason).inc()

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Count a session for as long as it lives."""
        self.sessions.inc()
        self.active_sessions.inc()
        try:
            yield
        finally:
            self.active_sessions.dec()

    def observe(self, event: OutputEvent) -> None:
        """Take what counts from an event a session emits."""
        if isinstance(event, Metrics):
            self._observe_turn(event.values)
        elif isinstance(event, Error):
            self.errors.labels(event.code).inc()
        elif isinstance(event, Clear):
            self.barge_ins.inc()

    def _observe_turn(self, values: dict) -> None:
        self.turns.inc()
        if (v2v := values.get("voice_to_voice_ms")) is not None:
            self.voice_to_voice.observe(v2v / 1000.0)
            if self.on_voice_to_voice is not None:
                self.on_voice_to_voice(v2v / 1000.0)
        for stage, key in STAGES.items():
            if (ms := values.get(key)) is not None:
                self.stages.labels(stage).observe(ms / 1000.0)

    async def watch_event_loop(self) -> None:
        """Measure event-loop lag until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_PROBE_S)
            lag = max(0.0, loop.time() - started - LAG_PROBE_S)
            self.loop_lag.observe(lag)
            if lag >= STALL_LOG_S:
                log.warning("the event loop ran %.0f ms late: blocked, or short of CPU", lag * 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ReportsDropped(Collector):
    """Session reports the process's post queue was too full to take (one queue per process)."""

    def collect(self) -> Iterable[Metric]:
        reports = sys.modules.get("voice_agent.agent.report_delivery")  # loaded only where an agent makes reports
        yield CounterMetricFamily(
            "voice_agent_session_reports_dropped",
            "Session reports not posted because the delivery queue was full.",
            value=reports.reports_dropped() if reports is not None else 0,
        )
