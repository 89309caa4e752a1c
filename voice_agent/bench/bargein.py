"""Barge-in eval: interruptions, acknowledgements and noise bursts over the agent's answers, through a local server.

Starts `voice-agent serve` with the embedded default models on a free loopback
port, and replays scripts/bargein_turns through it, one session at real-time
pace: each question is followed, 800 ms into the agent's answer, by a probe:
an interruption (the agent must stop), an acknowledgement ("yeah", "mm-hmm")
or a non-speech noise burst (door slam, clicks, cough, knocks, hiss, laugh),
which must not stop it. Reports per kind of probe what the agent did and,
for interruptions, the stop time: from the start of the interrupting speech
to when a client playing the agent's audio fell silent.

Writes artifacts/bargein/<date-time>/: bargein.json, bargein.md, the replay
report and the server log. See docs/endpointing.md.
"""

from __future__ import annotations

import argparse
import sys

from ..replay import bargein
from ..replay.runner import RunTrace
from ..replay.script import ScriptError, load_script
from . import harness
from .harness import ms

PROBE_TAGS = ("interruption", "acknowledgement", "noise")
OUTCOMES = ("cleared", "paused", "stopped", "kept talking", "not playing")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    harness.add_common_arguments(parser, "bargein", "bargein_turns", "script repeats")
    parser.add_argument(
        "--reply-timeout", type=float, default=15.0, help="seconds to wait for an answer [default %(default)s]"
    )
    thresholds = parser.add_argument_group("thresholds (exit status 1 when missed)")
    thresholds.add_argument(
        "--max-stop-p95-ms", type=float, help="95th percentile stop time of the interruptions, e.g. 400"
    )
    thresholds.add_argument(
        "--max-false-barge-ins",
        type=int,
        help="noises and acknowledgements that made the agent give up its answer, e.g. 0",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        script = load_script(args.script, 16000, harness.GAP_MS)
    except ScriptError as exc:
        print(f"voice-agent bench bargein: {exc}", file=sys.stderr)
        return harness.EXIT_ERROR
    out = harness.output_folder(args.out, "bargein")

    result = harness.started(args.command_line)
    replayed = harness.replay_locally("bargein", args.serve_args, script, args.repeats, args.reply_timeout, out)
    probes = [probe for trace in replayed.traces for probe in probe_results(trace)]
    result.update(
        {
            "load_average_after": harness.load_average(),
            "script": args.script,
            "serve_args": args.serve_args,
            "seconds": replayed.seconds,
            "failure": replayed.failure,
            "replay_report": replayed.report,
            "summary": bargein.summarise(probes),
            "probes": probes,
        }
    )
    failures = check(result["summary"], args.max_stop_p95_ms, args.max_false_barge_ins)
    return harness.finish(out, "bargein", result, markdown(result), failures, replayed.failure)


def probe_results(trace: RunTrace) -> list[dict]:
    """What the agent did about each probe of one replayed run."""
    results = []
    for sent in trace.turns:
        tag = next((tag for tag in sent.turn.tags if tag in PROBE_TAGS), None)
        if tag is None:
            continue
        outcome = bargein.probe_outcome(trace.received, sent.speech_start_at, sent.speech_end_at)
        results.append({"name": sent.turn.name, "tag": tag, "repeat": trace.repeat, **outcome})
    return results


def false_barge_ins(summary: dict) -> int:
    return sum(summary[tag]["outcomes"].get("cleared", 0) for tag in ("acknowledgement", "noise") if tag in summary)


def check(summary: dict, max_stop_p95_ms: float | None, max_false: int | None) -> list[str]:
    failures = []
    interruptions = summary.get("interruption")
    if max_stop_p95_ms is not None and interruptions is not None:
        p95 = interruptions["stop_ms"]["p95"]
        missed = interruptions["judged"] - interruptions["outcomes"].get("cleared", 0)
        if p95 is None or p95 > max_stop_p95_ms:
            failures.append(f"interruption stop time p95 {ms(p95)} > {max_stop_p95_ms:.0f} ms")
        if missed:
            failures.append(f"{missed} interruption(s) did not stop the agent")
    if max_false is not None and false_barge_ins(summary) > max_false:
        failures.append(f"{false_barge_ins(summary)} false barge-in(s) > {max_false}")
    return failures


def markdown(result: dict) -> str:
    lines = [harness.machine_line(result), f"Command: `{result['command']}`", ""]
    header = ["probe", "n", *OUTCOMES, "stop p50", "p95", "max", "clear p50", "p95"]
    rows = [
        [tag, s["probes"]]
        + [s["outcomes"].get(o, 0) for o in OUTCOMES]
        + [ms(s["stop_ms"]["p50"]), ms(s["stop_ms"]["p95"]), ms(s["stop_ms"]["max"])]
        + [ms(s["clear_ms"]["p50"]), ms(s["clear_ms"]["p95"])]
        for tag, s in result["summary"].items()
    ]
    lines += harness.table(header, rows)
    lines += [
        "",
        "False barge-ins (a noise or an acknowledgement made the agent give up its answer): "
        f"{false_barge_ins(result['summary'])}.",
        "",
    ]
    rows = [
        [p["name"], p["tag"], p["outcome"], ms(p["stop_ms"]), ms(p["clear_ms"]), ms(p["silent_ms"])]
        for p in result["probes"]
    ]
    lines += harness.table(["probe", "kind", "outcome", "stop", "clear", "silent for"], rows, "lllrrr")
    return "\n".join(lines)
