"""The barge-in eval behind scripts/bargein_eval: see docs/endpointing.md.

Starts `voice-agent serve` with the embedded default models on a free loopback
port, and replays scripts/bargein_turns through it, one session at real-time
pace: each question is followed, 800 ms into the agent's answer, by a probe:
an interruption (the agent must stop), an acknowledgement ("yeah", "mm-hmm")
or a non-speech noise burst (door slam, clicks, cough, knocks, hiss, laugh),
which must not stop it. Reports per kind of probe what the agent did and,
for interruptions, the stop time: from the start of the interrupting speech
to when a client playing the agent's audio fell silent.

Writes artifacts/bargein/<date-time>/: bargein.json, bargein.md, the replay
report and the server log.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (scripts/bench.py: machine, load average)
import endpoint_eval  # noqa: E402  (replay on a fresh local server)

from voice_agent.replay import bargein  # noqa: E402
from voice_agent.replay.runner import RunTrace  # noqa: E402
from voice_agent.replay.script import ScriptError, load_script  # noqa: E402

ROOT = bench.ROOT
SCRIPT = ROOT / "scripts" / "bargein_turns" / "script.yaml"
PROBE_TAGS = ("interruption", "acknowledgement", "noise")
EXIT_THRESHOLD = 1
EXIT_ERROR = 2


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bargein_eval",
        description="Barge-in eval: interruptions, acknowledgements and noise bursts over the agent's answers, "
        "through a local server with the default models.",
        epilog="Arguments after -- go to `voice-agent serve`, e.g. scripts/bargein_eval -- --barge-in-min-speech-ms 200",
    )
    parser.add_argument("--script", default=str(SCRIPT), help="turn script [default scripts/bargein_turns/script.yaml]")
    parser.add_argument("-n", "--repeats", type=int, default=1, help="script repeats [default %(default)s]")
    parser.add_argument(
        "--reply-timeout", type=float, default=15.0, help="seconds to wait for an answer [default %(default)s]"
    )
    parser.add_argument("--out", help="output folder [default artifacts/bargein/<date-time>]")
    thresholds = parser.add_argument_group("thresholds (exit status 1 when missed)")
    thresholds.add_argument(
        "--max-stop-p95-ms", type=float, help="95th percentile stop time of the interruptions, e.g. 400"
    )
    thresholds.add_argument(
        "--max-false-barge-ins",
        type=int,
        help="noises and acknowledgements that made the agent give up its answer, e.g. 0",
    )
    args, serve_args = parser.parse_known_args()
    serve_args = [a for a in serve_args if a != "--"]
    try:
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        script = load_script(args.script, 16000, endpoint_eval.GAP_MS)
    except ScriptError as exc:
        print(f"scripts/bargein_eval: {exc}", file=sys.stderr)
        return EXIT_ERROR
    out = Path(args.out or ROOT / "artifacts" / "bargein" / datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)

    load_before = bench._load_average()
    replayed = endpoint_eval.replay_locally("bargein", serve_args, script, args.repeats, args.reply_timeout, out)
    probes = [probe for trace in replayed.traces for probe in probe_results(trace)]
    result = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["scripts/bargein_eval", *sys.argv[1:]]),
        "machine": bench._machine(),
        "load_average_before": load_before,
        "load_average_after": bench._load_average(),
        "script": args.script,
        "serve_args": serve_args,
        "seconds": replayed.seconds,
        "failure": replayed.failure,
        "replay_report": replayed.report,
        "summary": bargein.summarise(probes),
        "probes": probes,
    }
    result["failures"] = check(result["summary"], args.max_stop_p95_ms, args.max_false_barge_ins)
    (out / "bargein.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / "bargein.md").write_text(table + "\n")
    print(table)
    print(f"\nwritten to {out}", file=sys.stderr)
    if replayed.failure:
        print(f"the replay failed: {replayed.failure}", file=sys.stderr)
        return EXIT_ERROR
    for failure in result["failures"]:
        print(f"threshold missed: {failure}", file=sys.stderr)
    return EXIT_THRESHOLD if result["failures"] else 0


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
            failures.append(f"interruption stop time p95 {bench._ms(p95)} > {max_stop_p95_ms:.0f} ms")
        if missed:
            failures.append(f"{missed} interruption(s) did not stop the agent")
    if max_false is not None and false_barge_ins(summary) > max_false:
        failures.append(f"{false_barge_ins(summary)} false barge-in(s) > {max_false}")
    return failures


def markdown(result: dict) -> str:
    machine = result["machine"]
    outcomes = ("cleared", "paused", "stopped", "kept talking", "not playing")
    lines = [
        f"Machine: {machine['processor']}, {machine['cpus']} CPUs; load average {result['load_average_before']} "
        f"before, {result['load_average_after']} after; {result['created']}.",
        f"Command: `{result['command']}`",
        "",
        "| probe | n | " + " | ".join(outcomes) + " | stop p50 | p95 | max | clear p50 | p95 |",
        "|---|---:|" + "---:|" * (len(outcomes) + 5),
    ]
    for tag, s in result["summary"].items():
        lines.append(
            f"| {tag} | {s['probes']} | "
            + " | ".join(str(s["outcomes"].get(o, 0)) for o in outcomes)
            + f" | {bench._ms(s['stop_ms']['p50'])} | {bench._ms(s['stop_ms']['p95'])} | {bench._ms(s['stop_ms']['max'])}"
            f" | {bench._ms(s['clear_ms']['p50'])} | {bench._ms(s['clear_ms']['p95'])} |"
        )
    lines += [
        "",
        f"False barge-ins (a noise or an acknowledgement made the agent give up its answer): {false_barge_ins(result['summary'])}.",
        "",
        "| probe | kind | outcome | stop | clear | silent for |",
        "|---|---|---|---:|---:|---:|",
    ]
    for probe in result["probes"]:
        lines.append(
            f"| {probe['name']} | {probe['tag']} | {probe['outcome']} | {bench._ms(probe['stop_ms'])} "
            f"| {bench._ms(probe['clear_ms'])} | {bench._ms(probe['silent_ms'])} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
