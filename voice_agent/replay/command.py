"""``voice-agent replay``: arguments, progress, and where the report goes."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from ..audio import SUPPORTED_RATES
from .report import Thresholds, build, summary_table, turns_table
from .runner import Options, analyse, run_level
from .script import DEFAULT_GAP_MS, ScriptError, from_files, load_script, parse_start
from .transport import CODECS, ConnectError, Connection

EXIT_THRESHOLD = 1
EXIT_ERROR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", help="audio files, one per turn, in order (or use --script)")
    parser.add_argument("--script", help="YAML or JSON turn script (see docs/replay.md)")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/ws", help="agent WebSocket URL [default %(default)s]")
    parser.add_argument(
        "--token",
        default=os.environ.get("VOICE_AGENT_AUTH_TOKEN", ""),
        help="bearer token for a server started with --auth-token [env VOICE_AGENT_AUTH_TOKEN]",
    )
    parser.add_argument(
        "--transport", default="native", choices=sorted(CODECS), help="wire protocol [default %(default)s]"
    )
    parser.add_argument(
        "--rate", type=int, default=16000, choices=SUPPORTED_RATES, help="session sample rate [default %(default)s]"
    )
    parser.add_argument(
        "--start",
        default="after-reply",
        help="start rule for turns given as files: after-reply[:GAP_MS], delay:MS or barge-in:MS [default %(default)s]",
    )
    parser.add_argument(
        "--gap-ms",
        type=int,
        default=DEFAULT_GAP_MS,
        help="silence after an answer before the next turn [default %(default)s]",
    )
    parser.add_argument(
        "-n",
        "--repeats",
        type=int,
        default=1,
        help="run the whole script this many times per session [default %(default)s]",
    )
    parser.add_argument(
        "--sessions",
        default="1",
        help="concurrent sessions; a comma list such as 1,2,4 runs each level in turn [default %(default)s]",
    )
    parser.add_argument(
        "--stagger-ms", type=int, default=700, help="delay between starting concurrent sessions [default %(default)s]"
    )
    parser.add_argument(
        "--reply-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for an answer before going on [default %(default)s]",
    )
    parser.add_argument("--out", help="folder for report.json, timeline-*.png and histogram.png")
    parser.add_argument("--json", help="write the JSON report here (default: OUT/report.json)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")
    parser.add_argument("--per-turn", action="store_true", help="print every run's turns, not only the summary")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    thresholds = parser.add_argument_group("thresholds (exit status 1 when missed, at every concurrency level)")
    thresholds.add_argument("--max-p50-ms", type=float, help="median client voice-to-voice")
    thresholds.add_argument("--max-p95-ms", type=float, help="95th percentile client voice-to-voice")
    thresholds.add_argument("--max-wer", type=float, help="mean word error rate of the final user transcripts")


def main(args: argparse.Namespace) -> int:
    try:
        levels = _levels(args.sessions)
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        if args.script:
            if args.files:
                raise ScriptError("give audio files or --script, not both")
            script = load_script(args.script, args.rate, args.gap_ms)
        else:
            script = from_files(args.files, args.rate, parse_start(args.start, args.gap_ms))
    except ScriptError as exc:
        print(f"voice-agent replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    options = Options(args.url, args.transport, args.token, reply_timeout_s=args.reply_timeout)
    try:
        runs = asyncio.run(_replay(script, options, levels, args))
    except ConnectError as exc:
        print(f"voice-agent replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    thresholds = Thresholds(args.max_p50_ms, args.max_p95_ms, args.max_wer)
    report = build(
        script=script,
        url=args.url,
        transport=args.transport,
        options={
            "sessions": levels,
            "repeats": args.repeats,
            "stagger_ms": args.stagger_ms,
            "reply_timeout_s": args.reply_timeout,
            "lead_in_ms": options.lead_in_ms,
            "tail_ms": options.tail_ms,
        },
        runs=runs,
        thresholds=thresholds,
    )
    _write(report, args)
    _print(report, args)
    return 0 if report["passed"] else EXIT_THRESHOLD


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise ScriptError(f"--sessions {text!r}: give positive numbers, e.g. 1 or 1,2,4")
    return levels


async def _replay(script, options: Options, levels: list[int], args: argparse.Namespace) -> list[dict]:
    # Fail fast and clearly when nothing listens, before any session starts.
    probe = await Connection.open(options.url, CODECS[options.transport](), None, options.token)
    await probe.close()
    total = sum(levels) * args.repeats * len(script.turns)
    progress = _progress(total, args.no_progress)
    runs: list[dict] = []
    try:
        for level in levels:
            progress.set_description(f"{level} session(s)")
            traces = await run_level(
                script, options, level, args.repeats, args.stagger_ms / 1000, lambda: progress.update(1)
            )
            runs += [analyse(trace) for trace in traces]
    finally:
        progress.close()
    return runs


def _progress(total: int, disabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="turn", disable=disabled, file=sys.stderr, dynamic_ncols=True)


def _write(report: dict, args: argparse.Namespace) -> None:
    out = Path(args.out) if args.out else None
    json_path = Path(args.json) if args.json else (out / "report.json" if out else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if not args.no_plots:
            from . import plots

            for run in report["runs"]:
                if run["turns"]:
                    name = f"timeline-c{run['concurrency']}-s{run['session'] + 1}-r{run['repeat'] + 1}.png"
                    plots.timeline(run, out / name)
                    run["timeline"] = name
            plots.histogram(report["runs"], out / "histogram.png")
            report["histogram"] = "histogram.png"
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _print(report: dict, args: argparse.Namespace) -> None:
    runs = report["runs"]
    if args.per_turn or len(runs) == 1:
        for run in runs:
            print(f"\n{run['concurrency']} session(s), session {run['session'] + 1}, repeat {run['repeat'] + 1}")
            print(turns_table(run))
    print("\nvoice-to-voice and transcript latency at the client (server metrics beside):")
    print(summary_table(report["summary"]))
    for run in runs:
        if run["failure"]:
            print(
                f"run {run['concurrency']}/{run['session'] + 1}/{run['repeat'] + 1} failed: {run['failure']}",
                file=sys.stderr,
            )
        for error in run["errors"]:
            print(
                f"agent error in run {run['concurrency']}/{run['session'] + 1}/{run['repeat'] + 1}: {error}",
                file=sys.stderr,
            )
    if args.out:
        print(f"\nreport, timelines and histogram in {args.out}")
    for failure in report["failures"]:
        print(f"threshold missed: {failure}", file=sys.stderr)
