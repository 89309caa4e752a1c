"""bench load's reading of the server's stage queues: what each level started, waited and skipped."""

from __future__ import annotations

from voice_agent.bench.load import _queues_between, parse_stage_queues, queues_lines
from voice_agent.engines.stt_queue import Kind
from voice_agent.server.metrics import ServerMetrics


def test_the_queues_of_one_level_are_the_difference_of_the_servers_figures_around_it():
    metrics = ServerMetrics()
    metrics.stt_started(Kind.FINAL, 0.5)
    metrics.stage_started("llm", "answer", 0.2)
    before = parse_stage_queues(metrics.render().decode())
    for waited in (0.1, 0.3):
        metrics.stt_started(Kind.FINAL, waited)
    metrics.stt_started(Kind.PARTIAL, 0.0)
    metrics.stt_skipped(Kind.PARTIAL, "partials_busy")
    metrics.stt_skipped(Kind.PARTIAL, "partials_busy")
    metrics.stage_started("tts", "chunk", 0.04)
    level = _queues_between(before, parse_stage_queues(metrics.render().decode()))
    assert level == {
        "stt final": {"started": 2, "mean_wait_ms": 200.0, "skipped": {}},
        "stt partial": {"started": 1, "mean_wait_ms": 0.0, "skipped": {"partials_busy": 2}},
        "tts chunk": {"started": 1, "mean_wait_ms": 40.0, "skipped": {}},
    }  # the LLM's answer before the level is not in it
    table = queues_lines([{"sessions": 4, "stage_queues": level}])
    assert "| stt partial | 1, 0 ms (2 partials_busy skipped) |" in table
