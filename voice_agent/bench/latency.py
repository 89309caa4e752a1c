"""Latency benchmark: a local server with the default models, replayed at several concurrency levels.

Starts `voice-agent serve` with the embedded default models on a free loopback
port, replays the fixed benchmark conversation (voice_agent/bench/turns/bench_turns) at each
concurrency level with `voice-agent replay`, samples the server's resident
memory and event-loop lag while it runs, and writes everything to one folder:
bench.json, bench.md (the figures as a Markdown table), server.log, and per level the
replay's report.json, timelines and histogram. See docs/replay.md.
"""

from __future__ import annotations

import argparse
import shlex

from . import harness
from .harness import ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", default="1,2,4", help="concurrency levels [default %(default)s]")
    harness.add_common_arguments(parser, "bench", "bench_turns", "script repeats per session")


def run(args: argparse.Namespace) -> int:
    levels = [int(level) for level in args.sessions.split(",")]
    out = harness.output_folder(args.out, "bench")
    result = harness.started(args.command_line)
    levels_run = []
    with harness.local_server(args.serve_args, out / "server.log") as (server, url):
        result["server_command"] = shlex.join(["voice-agent", "serve", *args.serve_args])
        result["server_idle_rss_mb"] = harness.rss_mb(server.pid, "VmRSS")
        for level in levels:
            levels_run.append(
                harness.replay_level(level, script=args.script, repeats=args.repeats, url=url, out=out, server=server)
            )
        result["server_peak_rss_mb"] = harness.rss_mb(server.pid, "VmHWM")
    result["levels"] = levels_run
    failed = [level["sessions"] for level in levels_run if level["exit_status"] not in (0, 1)]
    error = f"the replay at {failed} session(s) failed" if failed else None
    return harness.finish(out, "bench", result, markdown(result), error=error)


def markdown(result: dict) -> str:
    header = [
        "sessions",
        "turns",
        "voice-to-voice p50",
        "p95",
        "max",
        "server v2v p50",
        "client − server p50",
        "final transcript p50",
        "barge-in stop p50",
        "no answer",
        "player ran dry (n, max)",
        "server peak RSS",
        "event-loop lag p95",
    ]
    rows = []
    for level in result["levels"]:
        s = level["summary"]
        if s is None:
            rows.append([level["sessions"], f"failed (exit {level['exit_status']})"] + [""] * (len(header) - 2))
            continue
        v2v = s["voice_to_voice_ms"]
        rows.append(
            [
                level["sessions"],
                s["turns"],
                ms(v2v["p50"]),
                ms(v2v["p95"]),
                ms(v2v["max"]),
                ms(s["server_voice_to_voice_ms"]["p50"]),
                ms(s["client_minus_server_ms"]["p50"]),
                ms(s["final_transcript_ms"]["p50"]),
                ms(s["barge_in_stop_ms"]["p50"]),
                s["unanswered"],
                f"{s['dry_spells_ms']['n']}, {ms(s['dry_spells_ms']['max'])}",
                f"{level['server_peak_rss_mb']} MiB",
                ms(level["server_loop_lag_ms"]["p95"]),
            ]
        )
    lines = [harness.machine_line(result), f"Command: `{result['command']}`", ""]
    return "\n".join(lines + harness.table(header, rows, "r" * len(header)))
