"""Load, garbage-flood and soak test of a local server with the default models (loopback only).

One `voice-agent serve` with the embedded defaults on a free loopback port,
then three phases against it, each bounded in time and count:

1. ramp: the benchmark conversation (voice_agent/bench/turns/bench_turns) replayed at
   increasing concurrency, until the median client voice-to-voice passes the
   latency budget (``--budget-ms``, the server's ``--latency-budget-ms``) or
   the levels run out; the last level within it is the number of sessions
   this machine carries (the knee). The server admits every session here, and
   its own measured estimate (``/readyz``) is reported beside the knee;
2. flood: one replayed session alone, then beside a client that sends nothing
   but malformed messages (and now and then a frame over the size limit or
   text that is not UTF-8, which get it closed, so it reconnects); repeated,
   and the medians compared (the bar: at most 20 % slower);
3. soak: a few sessions replaying the conversation over and over for a fixed
   time while the server's resident memory is sampled; the bar: the last
   minute's median RSS within 10 % of the first minute's after a warm-up.
   The warm-up is traffic like the rest, kept out of the comparison because
   the runtimes size their pools to the largest inputs they have seen
   (docs/results/load.md). Its growth is reported too.

Everything lands in one folder: load.json, load.md (the figures as a Markdown table) and each
replay's report. See docs/operations.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shlex
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import websockets

from ..config import Settings
from . import harness
from .harness import ms

FLOOD_BAR = 0.20
RSS_BAR = 0.10
RSS_SAMPLE_S = 5.0
RSS_WINDOW_S = 60.0
MAX_SOAK_PASSES = 200  # bounded in count as well as time

# What a misbehaving client sends: each must earn an error event and nothing else.
GARBAGE: tuple[str | bytes, ...] = (
    "{not json",
    "[1, 2, 3]",
    '"a string"',
    "[" * 5000,
    '{"type": "no-such-type"}',
    '{"type": 5}',
    '{"type": "start", "sample_rate": NaN}',
    '{"type": "start", "sample_rate": 1e308}',
    '{"type": "start", "sample_rate": "16000"}',
    '{"type": "start", "sample_rate": 44100}',
    '{"type": "mark", "name": 123}',
    '{"type": "text", "text": ["x"]}',
    '{"type": "text", "text": "   "}',
    json.dumps({"type": "text", "text": "x" * 5000}),
    b"\x01\x02\x03",
)
OVERSIZED = b"\x00" * ((1 << 20) + 2)  # over the 1 MiB message limit: closed with 1009
NOT_UTF8 = b'{"type": "text", "text": "\xff\xfe"}'  # closed with 1007


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--levels", default="1,2,4,6,8,10", help="ramp concurrency levels [default %(default)s]")
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=float(Settings.latency_budget_ms),
        help="the latency budget: median client voice-to-voice per level [default %(default)s]",
    )
    parser.add_argument(
        "--all-levels", action="store_true", help="go on past the level where the median passes the budget"
    )
    parser.add_argument(
        "--flood-rounds", type=int, default=2, help="baseline + flooded replays, each [default %(default)s]"
    )
    parser.add_argument(
        "--flood-rate", type=float, default=150.0, help="garbage messages per second [default %(default)s]"
    )
    parser.add_argument(
        "--hard-every-s",
        type=float,
        default=5.0,
        help="an oversized or non-UTF-8 frame this often [default %(default)s]",
    )
    parser.add_argument(
        "--soak-s", type=float, default=600.0, help="soak duration in seconds; 0 skips it [default %(default)s]"
    )
    parser.add_argument(
        "--soak-warmup-s",
        type=float,
        default=300.0,
        help="soak traffic before the first minute compared [default %(default)s]",
    )
    parser.add_argument(
        "--soak-sessions", type=int, default=2, help="concurrent sessions in the soak [default %(default)s]"
    )
    harness.add_common_arguments(parser, "load", "bench_turns", "script repeats per session and replay")


def run(args: argparse.Namespace) -> int:
    levels = [int(level) for level in args.levels.split(",")]
    out = harness.output_folder(args.out, "load")
    result = harness.started(args.command_line)
    # Every replayed session comes from this machine's address: lift the per-address limit (4) for the ramp;
    # and no fixed maximum (the local server admits every session whatever the load): where the budget
    # breaks is the point.
    serve_args = ["--max-sessions-per-client", "0", "--max-sessions", "0", *args.serve_args]
    result["server_command"] = shlex.join(["voice-agent", "serve", "--host", "127.0.0.1", *serve_args])
    with harness.local_server(serve_args, out / "server.log") as (server, url):
        result["ramp"] = ramp(levels, args, url, out, server)
        if args.flood_rounds > 0:
            result["flood"] = flood(args, url, out, server)
        if args.soak_s > 0:
            result["soak"] = soak(args, url, out, server)
        result["load_average_after"] = harness.load_average()
    result["server_exit_status"] = server.returncode  # 0: the graceful shutdown worked
    return harness.finish(out, "load", result, markdown(result), failures(result))


def _level(level: int, args: argparse.Namespace, url: str, out: Path, server: subprocess.Popen) -> dict:
    """One replay at ``level`` sessions, with what the stages' queues did meanwhile (the server's ``/metrics``)."""
    before = stage_queues(url)
    entry = harness.replay_level(level, script=args.script, repeats=args.repeats, url=url, out=out, server=server)
    entry["stage_queues"] = _queues_between(before, stage_queues(url))
    return entry


def stage_queues(url: str) -> dict[str, float]:
    """The server's queue figures so far, from ``/metrics``: per stage and kind the work started (``count``)
    and its total wait for a worker (``sum``, seconds), and the transcriptions skipped, by kind and reason."""
    try:
        with urllib.request.urlopen(url.replace("ws://", "http://").replace("/ws", "/metrics"), timeout=5) as r:
            return parse_stage_queues(r.read().decode())
    except OSError:
        return {}


def parse_stage_queues(text: str) -> dict[str, float]:
    """:func:`stage_queues` from the text of ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    figures: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removeprefix("voice_agent_")
            if name.endswith(("_queue_wait_seconds_sum", "_queue_wait_seconds_count")):
                stage, figure = name.split("_", 1)[0], name.rsplit("_", 1)[1]
                figures[f"{stage} {sample.labels.get('kind', '')} {figure}"] = sample.value
            elif name == "stt_skipped_total":
                figures[f"stt {sample.labels['kind']} skipped {sample.labels['reason']}"] = sample.value
    return figures


def _queues_between(before: dict[str, float], after: dict[str, float]) -> dict[str, dict]:
    """Per stage and kind, over one level: the work started, its mean wait for a worker, and the skipped."""
    queues: dict[str, dict] = {}
    for key, value in after.items():
        stage, kind, figure, *reason = key.split(" ")
        change = value - before.get(key, 0.0)
        entry = queues.setdefault(f"{stage} {kind}", {"started": 0, "mean_wait_ms": None, "skipped": {}})
        if figure == "count":
            entry["started"] = int(change)
        elif figure == "skipped" and change:
            entry["skipped"][reason[0]] = int(change)
    for name, entry in queues.items():
        waited = after.get(f"{name} sum", 0.0) - before.get(f"{name} sum", 0.0)
        if entry["started"]:
            entry["mean_wait_ms"] = round(waited / entry["started"] * 1000, 1)
    return {name: entry for name, entry in sorted(queues.items()) if entry["started"] or entry["skipped"]}


def ramp(levels: list[int], args: argparse.Namespace, url: str, out: Path, server: subprocess.Popen) -> dict:
    results = []
    within = 0  # the highest level within budget below the first level over it
    over = False
    for level in levels:
        entry = _level(level, args, url, out / "ramp", server)
        entry["server_session_cost"] = (server_estimate(url) or {}).get("session_cost")
        results.append(entry)
        p50 = _p50(entry)
        fits = p50 is not None and p50 <= args.budget_ms and _failed(entry) == 0
        if fits and not over:
            within = level
        over = over or not fits
        if over and not args.all_levels:
            break
    return {
        "levels": results,
        "budget_ms": args.budget_ms,
        "within_budget_sessions": within,
        "server_estimate": server_estimate(url),
        "failed_runs": sum(_failed(e) for e in results),
    }


def server_estimate(url: str) -> dict | None:
    """The server's own capacity figures after the ramp (``/readyz``), and the sessions they admit at the
    default ``--capacity-target``."""
    try:
        with urllib.request.urlopen(url.replace("ws://", "http://").replace("/ws", "/readyz"), timeout=5) as r:
            figures = json.loads(r.read())
    except (OSError, ValueError):
        return None
    cost, idle, cores = figures.get("session_cost"), figures.get("idle_cost") or 0.0, figures.get("cores")
    target = Settings.capacity_target
    if cost and cores:
        figures["sessions_at_default_target"] = max(0, int((target * cores - idle) / cost + 1e-9))
        figures["default_target"] = target
    return figures


def flood(args: argparse.Namespace, url: str, out: Path, server: subprocess.Popen) -> dict:
    rounds = []
    for index in range(args.flood_rounds):
        baseline = _level(1, args, url, out / f"flood-{index + 1}-alone", server)
        flooder = Flooder(url, args.flood_rate, args.hard_every_s)
        flooder.start()
        try:
            flooded = _level(1, args, url, out / f"flood-{index + 1}-beside-garbage", server)
        finally:
            flooder.stop()
        rounds.append({"alone": baseline, "beside_garbage": flooded, "flooder": flooder.report()})
    alone = _pooled(out, "alone", args.flood_rounds)
    beside = _pooled(out, "beside-garbage", args.flood_rounds)
    increase = None if not alone or not beside else round((beside - alone) / alone, 3)
    return {
        "rounds": rounds,
        "alone_p50_ms": alone,
        "beside_garbage_p50_ms": beside,
        "increase": increase,
        "failed_runs": sum(_failed(r["alone"]) + _failed(r["beside_garbage"]) for r in rounds),
    }


def soak(args: argparse.Namespace, url: str, out: Path, server: subprocess.Popen) -> dict:
    sampler = harness.ServerSampler(server.pid, every_s=RSS_SAMPLE_S)
    sampler.start()
    passes: list[dict] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.soak_warmup_s + args.soak_s and len(passes) < MAX_SOAK_PASSES:
            passes.append(_level(args.soak_sessions, args, url, out / "soak" / f"pass-{len(passes) + 1}", server))
    finally:
        sampler.stop()
    samples = sampler.rss
    first = [rss for at, rss in samples if args.soak_warmup_s <= at <= args.soak_warmup_s + RSS_WINDOW_S]
    last_start = samples[-1][0] - RSS_WINDOW_S if samples else 0
    last = [rss for at, rss in samples if at >= last_start]
    first_mb, last_mb = statistics.median(first), statistics.median(last)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "sessions": args.soak_sessions,
        "warmup_seconds": args.soak_warmup_s,
        "rss_start_mb": samples[0][1],
        "passes": len(passes),
        "turns": sum((p["summary"] or {}).get("turns", 0) for p in passes),
        "failed_runs": sum(_failed(p) for p in passes),
        "unanswered_turns": sum((p["summary"] or {}).get("unanswered", 0) for p in passes),
        "rss_first_minute_mb": first_mb,
        "rss_last_minute_mb": last_mb,
        "rss_max_mb": max(rss for _, rss in samples),
        "rss_drift": round((last_mb - first_mb) / first_mb, 4),
        "rss_samples": samples,
        "level_p50_ms": [_p50(p) for p in passes],
    }


class Flooder(threading.Thread):
    """A client that sends only garbage, at a steady rate, reconnecting whenever it gets itself closed."""

    def __init__(self, url: str, rate: float, hard_every_s: float):
        super().__init__(daemon=True)
        self.url, self.rate, self.hard_every_s = url, rate, hard_every_s
        self.sent = 0
        self.connections = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.closes: collections.Counter[str] = collections.Counter()
        self.other_messages = 0
        self._stopping = threading.Event()

    def run(self) -> None:
        asyncio.run(self._flood())

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)

    def report(self) -> dict:
        return {
            "messages_sent": self.sent,
            "connections": self.connections,
            "errors_received": dict(self.errors),
            "closed_with": dict(self.closes),
            "other_messages_received": self.other_messages,
        }

    async def _flood(self) -> None:
        hard = [OVERSIZED, NOT_UTF8]
        while not self._stopping.is_set():
            try:
                async with websockets.connect(self.url, max_size=None) as ws:
                    self.connections += 1
                    reader = asyncio.create_task(self._read(ws))
                    connected = time.monotonic()
                    index = 0
                    while not self._stopping.is_set() and not reader.done():
                        if time.monotonic() - connected >= self.hard_every_s:
                            frame = hard[self.connections % 2]
                            await ws.send(frame, text=frame is NOT_UTF8)
                            self.sent += 1
                            await asyncio.wait_for(reader, 10)
                            break
                        await ws.send(GARBAGE[index % len(GARBAGE)])
                        self.sent += 1
                        index += 1
                        await asyncio.sleep(1 / self.rate)
                    reader.cancel()
                    await asyncio.gather(reader, return_exceptions=True)
            except (TimeoutError, OSError, websockets.WebSocketException) as exc:
                self.closes[f"{type(exc).__name__}"] += 1
                await asyncio.sleep(0.1)

    async def _read(self, ws) -> None:
        try:
            async for message in ws:
                kind = json.loads(message) if isinstance(message, str) else None
                if kind and kind.get("type") == "error":
                    self.errors[kind["code"]] += 1
                else:
                    self.other_messages += 1
        except websockets.ConnectionClosed:
            pass
        finally:
            code = ws.close_code
            self.closes[str(code)] += 1


def _p50(entry: dict) -> float | None:
    summary = entry.get("summary")
    return None if summary is None else summary["voice_to_voice_ms"]["p50"]


def _failed(entry: dict) -> int:
    summary = entry.get("summary")
    if summary is None:
        return 1
    return summary["failed_runs"]


def _pooled(out: Path, kind: str, rounds: int) -> float | None:
    """Median client voice-to-voice over every turn of every round of one kind."""
    values = []
    for index in range(rounds):
        report = out / f"flood-{index + 1}-{kind}" / "sessions-1" / "report.json"
        if report.exists():
            for run in json.loads(report.read_text())["runs"]:
                values += [t["voice_to_voice_ms"] for t in run["turns"] if t["voice_to_voice_ms"] is not None]
    return round(statistics.median(values), 1) if values else None


def failures(result: dict) -> list[str]:
    """The bars this run missed: failed replays, a flood slowdown over FLOOD_BAR, an RSS drift over RSS_BAR."""
    missed = []
    if result["ramp"]["failed_runs"]:
        missed.append(f"{result['ramp']['failed_runs']} ramp run(s) failed")
    if (f := result.get("flood")) is not None:
        if f["failed_runs"]:
            missed.append(f"{f['failed_runs']} flood run(s) failed")
        if (f["increase"] or 0) > FLOOD_BAR:
            missed.append(f"beside garbage {f['increase']:+.0%} slower > +{FLOOD_BAR:.0%}")
    if (s := result.get("soak")) is not None:
        if s["failed_runs"]:
            missed.append(f"{s['failed_runs']} soak run(s) failed")
        if abs(s["rss_drift"]) > RSS_BAR:
            missed.append(f"soak RSS drift {s['rss_drift']:+.1%} > ±{RSS_BAR:.0%}")
    return missed


def markdown(result: dict) -> str:
    header = [
        "sessions",
        "turns",
        "v2v p50",
        "p95",
        "server v2v p50",
        "no answer",
        "failed runs",
        "server peak RSS",
        "session cost",
    ]
    rows = []
    for level in result["ramp"]["levels"]:
        s = level["summary"]
        if s is None:
            rows.append([level["sessions"], f"failed (exit {level['exit_status']})"] + [""] * (len(header) - 2))
            continue
        rows.append(
            [
                level["sessions"],
                s["turns"],
                ms(s["voice_to_voice_ms"]["p50"]),
                ms(s["voice_to_voice_ms"]["p95"]),
                ms(s["server_voice_to_voice_ms"]["p50"]),
                s["unanswered"],
                s["failed_runs"],
                f"{level['server_peak_rss_mb']} MiB",
                "" if (cost := level.get("server_session_cost")) is None else f"{cost} core-s/s",
            ]
        )
    lines = [harness.machine_line(result), f"Command: `{result['command']}`", ""]
    lines += harness.table(header, rows, "r" * len(header))
    lines += ["", knee_line(result["ramp"]), "", *queues_lines(result["ramp"]["levels"])]
    if (f := result.get("flood")) is not None:
        sent = sum(r["flooder"]["messages_sent"] for r in f["rounds"])
        lines.append(
            f"Garbage flood: median voice-to-voice {ms(f['alone_p50_ms'])} alone, "
            f"{ms(f['beside_garbage_p50_ms'])} beside a client sending {sent} malformed messages "
            f"({'+' if (f['increase'] or 0) >= 0 else ''}{(f['increase'] or 0) * 100:.0f} %, bar +{FLOOD_BAR * 100:.0f} %); "
            f"failed runs {f['failed_runs']}."
        )
    if (s := result.get("soak")) is not None:
        lines.append(
            f"Soak: {s['sessions']} sessions for {s['seconds']:.0f} s, {s['turns']} turns, {s['failed_runs']} failed runs, "
            f"{s['unanswered_turns']} unanswered; server RSS {s['rss_start_mb']:.0f} MiB at the start, "
            f"{s['rss_first_minute_mb']:.0f} MiB in the first minute after a {s['warmup_seconds']:.0f} s warm-up, "
            f"{s['rss_last_minute_mb']:.0f} MiB in the last ({s['rss_drift'] * 100:+.1f} %, bar ±{RSS_BAR * 100:.0f} %), "
            f"max {s['rss_max_mb']:.0f} MiB."
        )
    return "\n".join(lines)


def queues_lines(levels: list[dict]) -> list[str]:
    """The stages' queues at each level: work started, its mean wait for a worker, and what was skipped."""
    names = sorted({name for level in levels for name in level.get("stage_queues", {})})
    if not names:
        return []
    rows = []
    for name in names:
        cells = []
        for level in levels:
            entry = level.get("stage_queues", {}).get(name)
            if entry is None:
                cells.append("")
                continue
            skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(entry["skipped"].items()))
            cell = f"{entry['started']}, {ms(entry['mean_wait_ms'])}" if entry["started"] else "0"
            cells.append(cell + (f" ({skipped} skipped)" if skipped else ""))
        rows.append([name, *cells])
    header = ["queue (started, mean wait)", *(f"{level['sessions']} sessions" for level in levels)]
    return ["Stage queues, from the server's /metrics over each level:", "", *harness.table(header, rows)]


def knee_line(ramp: dict) -> str:
    within, budget = ramp["within_budget_sessions"], ramp["budget_ms"]
    line = f"Sessions this machine carries within the {budget:.0f} ms budget (median client voice-to-voice): {within}."
    estimate = ramp.get("server_estimate") or {}
    if (sessions := estimate.get("sessions_at_default_target")) is not None:
        line += (
            f" The server's own estimate: {sessions} at --capacity-target {estimate['default_target']}"
            f" (a session measured at {estimate['session_cost']} core-s/s of {estimate['cores']:g} cores,"
            f" {estimate['idle_cost']} idle)."
        )
    return line
