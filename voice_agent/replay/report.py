"""The replay report: JSON document, terminal tables and threshold checks.

The JSON schema is documented in ``docs/replay.md``; bump ``SCHEMA`` when a
field changes meaning or goes away.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass

from .measure import distribution
from .script import Script

SCHEMA = "voice-agent-replay/1"

# The figures summarised per concurrency level, in table order: (key, column title).
FIGURES = (
    ("voice_to_voice_ms", "v2v client"),
    ("server_voice_to_voice_ms", "v2v server"),
    ("client_minus_server_ms", "client-server"),
    ("first_transcript_ms", "1st transcript"),
    ("final_transcript_ms", "final transcript"),
    ("barge_in_stop_ms", "barge-in stop"),
)


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def summarise(runs: Sequence[dict]) -> dict:
    """Per concurrency level: p50/p95/max of each figure, mean WER, turn counts."""
    levels: dict[str, dict] = {}
    for level in sorted({run["concurrency"] for run in runs}):
        level_runs = [run for run in runs if run["concurrency"] == level]
        turns = [turn for run in level_runs for turn in run["turns"]]
        wers = [turn["wer"] for turn in turns if turn["wer"] is not None]
        levels[str(level)] = {
            "runs": len(level_runs),
            "failed_runs": sum(1 for run in level_runs if run["failure"]),
            "turns": len(turns),
            "unanswered": sum(1 for turn in turns if turn["voice_to_voice_ms"] is None),
            "agent_spoke_during_turn": sum(
                1 for turn in turns if turn["agent_spoke_during_turn"] and not turn["start"].startswith("barge-in")
            ),
            # Barge-ins the agent answered with `clear`; the others found an answer ending anyway.
            "barge_ins_cleared": sum(1 for turn in turns if turn["barge_in_cleared"]),
            **{key: distribution([turn[key] for turn in turns]) for key, _ in FIGURES},
            # The player ran dry inside an answer: a chunk came late.
            "dry_spells_ms": distribution([gap for run in level_runs for gap in run["dry_spells_ms"]]),
            "wer_mean": round(sum(wers) / len(wers), 3) if wers else None,
        }
    return levels


@dataclass(frozen=True)
class Thresholds:
    max_p50_ms: float | None = None
    max_p95_ms: float | None = None
    max_wer: float | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def check(summary: dict, thresholds: Thresholds) -> list[str]:
    """Every missed threshold, as a sentence. A turn never answered misses any latency threshold."""
    failures = []
    latency = thresholds.max_p50_ms is not None or thresholds.max_p95_ms is not None
    for level, figures in summary.items():
        v2v = figures["voice_to_voice_ms"]
        for name, limit in (("p50", thresholds.max_p50_ms), ("p95", thresholds.max_p95_ms)):
            if limit is not None and v2v[name] is not None and v2v[name] > limit:
                failures.append(f"{level} session(s): voice-to-voice {name} {v2v[name]:.0f} ms > {limit:.0f} ms")
        if latency and figures["unanswered"]:
            failures.append(f"{level} session(s): {figures['unanswered']} turn(s) got no answer")
        if latency and figures["failed_runs"]:
            failures.append(f"{level} session(s): {figures['failed_runs']} run(s) failed")
        if (
            thresholds.max_wer is not None
            and figures["wer_mean"] is not None
            and figures["wer_mean"] > thresholds.max_wer
        ):
            failures.append(f"{level} session(s): mean WER {figures['wer_mean']:.2f} > {thresholds.max_wer:.2f}")
    return failures


def build(*, script: Script, url: str, transport: str, options: dict, runs: list[dict], thresholds: Thresholds) -> dict:
    summary = summarise(runs)
    failures = check(summary, thresholds)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "url": url,
        "transport": transport,
        "sample_rate": script.rate,
        "machine": machine(),
        "options": options,
        "script": {
            "source": script.source,
            "turns": [
                {
                    "name": turn.name,
                    "file": turn.source,
                    "start": str(turn.start),
                    "expect": turn.expect,
                    "duration_s": round(turn.duration_s, 3),
                    "speech_start_s": round(turn.speech.start / turn.rate, 3),
                    "speech_end_s": round(turn.speech.end / turn.rate, 3),
                }
                for turn in script.turns
            ],
        },
        "runs": runs,
        "summary": summary,
        "thresholds": thresholds.as_dict(),
        "failures": failures,
        "passed": not failures,
    }


# Terminal output.


def summary_table(summary: dict) -> str:
    header = ["sessions", "turns", "no answer"] + [title for _, title in FIGURES] + ["WER"]
    rows = [header, ["", "", ""] + ["p50 / p95 / max ms"] * len(FIGURES) + ["mean"]]
    for level, figures in summary.items():
        rows.append(
            [level, str(figures["turns"]), str(figures["unanswered"])]
            + [_triple(figures[key]) for key, _ in FIGURES]
            + [_number(figures["wer_mean"], 2)]
        )
    return _table(rows)


def turns_table(run: dict) -> str:
    header = ["#", "turn", "start", "v2v client", "v2v server", "diff", "final tr.", "barge-in", "WER", "transcript"]
    rows = [header]
    for turn in run["turns"]:
        rows.append(
            [
                str(turn["index"] + 1),
                turn["name"][:24],
                turn["start"],
                _number(turn["voice_to_voice_ms"]),
                _number(turn["server_voice_to_voice_ms"]),
                _number(turn["client_minus_server_ms"]),
                _number(turn["final_transcript_ms"]),
                _number(turn["barge_in_stop_ms"]),
                _number(turn["wer"], 2),
                (turn["transcript"] or "")[:40],
            ]
        )
    return _table(rows)


def _triple(figure: dict) -> str:
    if not figure["n"]:
        return "-"
    return f"{figure['p50']:.0f} / {figure['p95']:.0f} / {figure['max']:.0f}"


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.rjust(width) if _numeric(cell) else cell.ljust(width) for cell, width in zip(row, widths))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _numeric(cell: str) -> bool:
    return cell[:1].isdigit() or cell[:2].startswith("-") and cell[1:2].isdigit() or cell == "-"
