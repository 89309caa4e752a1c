"""The endpointing eval behind scripts/endpoint_eval: see docs/endpointing.md.

Starts `voice-agent serve` with the embedded default models on a free loopback
port (scripts/bench.py's local_server), replays the endpointing turns
(scripts/endpoint_turns: mid-turn pauses of 0.3 to 1.5 s and whole short
answers) through it with the replay client, one session at real-time pace, and
reports the false cut-off rate (the agent took the turn during a mid-turn
pause) and the delay after the true end of each turn (client voice-to-voice,
the server's endpoint_ms, the final transcript).

With --sweep, does that once per set of turn-detection thresholds
(--end-silence-complete-ms / --end-silence-ms / --end-silence-incomplete-ms),
one fresh server each, and draws the curve of false cut-offs against delay.

Writes artifacts/endpointing/<date-time>/: endpoint.json, endpoint.md, per
point the replay report and server log, and with --sweep sweep.png.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (scripts/bench.py: local_server, machine, load average)

from voice_agent.replay import endpointing  # noqa: E402
from voice_agent.replay.measure import send_time  # noqa: E402
from voice_agent.replay.report import Thresholds, build  # noqa: E402
from voice_agent.replay.runner import Options, RunTrace, analyse, run_level  # noqa: E402
from voice_agent.replay.script import ScriptError, load_script  # noqa: E402

ROOT = bench.ROOT
SCRIPT = ROOT / "scripts" / "endpoint_turns" / "script.yaml"
# The next turn starts once the answer to the last one has played, so long
# answers only make the eval slow: endpointing happens before the first word.
EVAL_SERVE_ARGS = ["--llm-max-tokens", "8"]
# complete / no hint / incomplete silences in ms, from eager to patient; 350/600/2000 are the defaults.
SWEEP = "200/400/800,350/600/1200,350/600/2000,500/800/1600,700/1000/2000,900/1200/2000,600/600/600"
THRESHOLD_FLAGS = ("--end-silence-complete-ms", "--end-silence-ms", "--end-silence-incomplete-ms")
GAP_MS = 300  # silence between an answer and the next turn: the agent is idle by then
POINT_TIMEOUT_S = 900  # one point's replay, bounded whatever the server does
EXIT_THRESHOLD = 1
EXIT_ERROR = 2


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/endpoint_eval",
        description="Endpointing eval: false cut-offs in mid-turn pauses and delay after true turn ends, "
        "through a local server with the default models.",
        epilog="Arguments after -- go to `voice-agent serve`, e.g. scripts/endpoint_eval -- --end-silence-ms 700",
    )
    parser.add_argument(
        "--script", default=str(SCRIPT), help="turn script [default scripts/endpoint_turns/script.yaml]"
    )
    parser.add_argument("-n", "--repeats", type=int, default=1, help="script repeats per point [default %(default)s]")
    parser.add_argument(
        "--sweep",
        nargs="?",
        const=SWEEP,
        help="sweep the turn thresholds: comma list of COMPLETE/DEFAULT/INCOMPLETE ms, one server each "
        f"[without a value: {SWEEP}]",
    )
    parser.add_argument(
        "--reply-timeout", type=float, default=15.0, help="seconds to wait for an answer [default %(default)s]"
    )
    parser.add_argument("--out", help="output folder [default artifacts/endpointing/<date-time>]")
    parser.add_argument(
        "--max-false-cutoff",
        type=float,
        help="exit 1 if the false cut-off rate is above this (e.g. 0.05); not with --sweep",
    )
    args, serve_args = parser.parse_known_args()
    serve_args = [a for a in serve_args if a != "--"]
    try:
        points = _points(args.sweep) if args.sweep else [("server defaults", [])]
        if args.sweep and args.max_false_cutoff is not None:
            raise ScriptError("--max-false-cutoff checks one configuration: leave out --sweep")
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        script = load_script(args.script, 16000, GAP_MS)
    except ScriptError as exc:
        print(f"scripts/endpoint_eval: {exc}", file=sys.stderr)
        return EXIT_ERROR
    out = Path(args.out or ROOT / "artifacts" / "endpointing" / datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)

    result = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["scripts/endpoint_eval", *sys.argv[1:]]),
        "machine": bench._machine(),
        "load_average_before": bench._load_average(),
        "script": args.script,
        "serve_args": EVAL_SERVE_ARGS + serve_args,
        "points": [],
    }
    for name, point_args in points:
        result["points"].append(_run_point(name, point_args + serve_args, script, args, out))
    result["load_average_after"] = bench._load_average()

    (out / "endpoint.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / "endpoint.md").write_text(table + "\n")
    print(table)
    if len(points) > 1:
        _plot(result, out / "sweep.png")
    print(f"\nwritten to {out}", file=sys.stderr)

    if any(point["failure"] for point in result["points"]):
        return EXIT_ERROR
    summary = result["points"][0]["summary"]
    if args.max_false_cutoff is not None and (
        summary["false_cutoff_rate"] > args.max_false_cutoff or summary["cutoffs_elsewhere"]
    ):
        print(
            f"threshold missed: false cut-off rate {summary['false_cutoff_rate']:.1%} > {args.max_false_cutoff:.1%}"
            f" (or {summary['cutoffs_elsewhere']} cut-off(s) outside the pauses)",
            file=sys.stderr,
        )
        return EXIT_THRESHOLD
    return 0


def _points(text: str) -> list[tuple[str, list[str]]]:
    points = []
    for part in text.split(","):
        values = part.strip().split("/")
        if len(values) != 3 or not all(v.isdigit() for v in values):
            raise ScriptError(f"--sweep point {part!r}: give COMPLETE/DEFAULT/INCOMPLETE in ms, e.g. 350/600/1200")
        args = [item for flag, value in zip(THRESHOLD_FLAGS, values) for item in (flag, value)]
        points.append(("/".join(values), args))
    return points


def _run_point(name: str, serve_args: list[str], script, args, out: Path) -> dict:
    print(f"\n== {name} ==", file=sys.stderr)
    slug = name.replace("/", "-").replace(" ", "-")
    replayed = replay_locally(slug, EVAL_SERVE_ARGS + serve_args, script, args.repeats, args.reply_timeout, out)
    turns = [turn for trace, run in zip(replayed.traces, replayed.runs) for turn in endpoint_turns(trace, run)]
    return {
        "name": name,
        "serve_args": EVAL_SERVE_ARGS + serve_args,
        "seconds": replayed.seconds,
        "failure": replayed.failure,
        "replay_report": replayed.report,
        "summary": endpointing.summarise(turns),
        "turns": turns,
    }


@dataclass
class Replayed:
    traces: list[RunTrace]
    runs: list[dict]  # the replay report's runs
    failure: str | None
    seconds: float
    report: str  # file name of the replay report, in the output folder


def replay_locally(slug: str, serve_args: list[str], script, repeats: int, reply_timeout: float, out: Path) -> Replayed:
    """A fresh local server with ``serve_args``; ``script`` replayed ``repeats`` times in one session.

    Writes server-SLUG.log and the replay's own report, replay-SLUG.json.
    """
    started = time.monotonic()
    failure = None
    traces: list[RunTrace] = []
    with bench.local_server(serve_args, out / f"server-{slug}.log") as (_, url):
        try:
            traces = asyncio.run(_replay(script, url, repeats, reply_timeout))
        except TimeoutError:
            failure = f"the replay took longer than {POINT_TIMEOUT_S} s"
    runs = [analyse(trace) for trace in traces]
    failure = failure or next((run["failure"] for run in runs if run["failure"]), None)
    report = build(
        script=script,
        url=url,
        transport="native",
        options={"sessions": [1], "repeats": repeats},
        runs=runs,
        thresholds=Thresholds(),
    )
    report_path = out / f"replay-{slug}.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return Replayed(traces, runs, failure, round(time.monotonic() - started, 1), report_path.name)


async def _replay(script, url: str, repeats: int, reply_timeout: float) -> list[RunTrace]:
    from tqdm import tqdm

    options = Options(url, reply_timeout_s=reply_timeout)
    with tqdm(total=repeats * len(script.turns), unit="turn", file=sys.stderr, dynamic_ncols=True) as progress:
        return await asyncio.wait_for(
            run_level(script, options, 1, repeats, 0.0, lambda: progress.update(1)), POINT_TIMEOUT_S
        )


def endpoint_turns(trace: RunTrace, run: dict) -> list[dict]:
    """The endpointing figures of each turn of one replayed run."""
    turns = []
    for sent, figures in zip(trace.turns, run["turns"]):
        frame = sent.frame_samples
        pauses_at = [
            (send_time(sent.frame_times, frame, start), send_time(sent.frame_times, frame, end - 1))
            for start, end in endpointing.pauses(sent.turn.audio, sent.turn.rate)
        ]
        measured = endpointing.measure_turn(
            trace.received,
            speech_start_at=sent.speech_start_at,
            speech_end_at=sent.speech_end_at,
            pauses_at=pauses_at,
            figures=figures,
        )
        turns.append(
            {
                "name": sent.turn.name,
                "tags": list(sent.turn.tags),
                "repeat": trace.repeat,
                "transcript": figures["transcript"],
                **measured,
            }
        )
    return turns


def markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        f"Machine: {machine['processor']}, {machine['cpus']} CPUs; load average {result['load_average_before']} "
        f"before, {result['load_average_after']} after; {result['created']}.",
        f"Command: `{result['command']}`",
        "",
        "| thresholds (complete / no hint / incomplete) | false cut-offs | of which heard | elsewhere "
        "| endpoint p50 | p95 | voice-to-voice p50 | p95 | final transcript p50 | no answer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in result["points"]:
        s = point["summary"]
        rate = (
            "–"
            if s["false_cutoff_rate"] is None
            else f"{s['false_cutoffs']}/{s['paused_turns']} ({s['false_cutoff_rate']:.0%})"
        )
        lines.append(
            f"| {point['name']} | {rate} | {s['spoke_in_pause']} | {s['cutoffs_elsewhere']} "
            f"| {bench._ms(s['endpoint_ms']['p50'])} | {bench._ms(s['endpoint_ms']['p95'])} "
            f"| {bench._ms(s['voice_to_voice_ms']['p50'])} | {bench._ms(s['voice_to_voice_ms']['p95'])} "
            f"| {bench._ms(s['final_transcript_ms']['p50'])} | {s['unanswered']} |"
            + (f" failed: {point['failure']}" if point["failure"] else "")
        )
    tags = sorted({tag for point in result["points"] for tag in point["summary"]["by_tag"]})
    if tags:
        lines += ["", "Cut-offs by kind of turn (tags in the turn script):", ""]
        lines += ["| thresholds | " + " | ".join(tags) + " |", "|---|" + "---:|" * len(tags)]
        for point in result["points"]:
            by_tag = point["summary"]["by_tag"]
            cells = [f"{by_tag[t]['cut_off']}/{by_tag[t]['turns']}" if t in by_tag else "–" for t in tags]
            lines.append(f"| {point['name']} | " + " | ".join(cells) + " |")
    for point in result["points"]:
        lines += [
            "",
            f"Turns at {point['name']}:",
            "",
            "| turn | pauses | cut off | v2v | endpoint | transcript |",
            "|---|---|---|---:|---:|---|",
        ]
        for turn in point["turns"]:
            pauses = " ".join(f"{p:.0f}" for p in turn["pauses_ms"]) or "–"
            cut = turn["cut_off"] or ""
            if turn["cut_off_pause_ms"] is not None:
                cut += f" {turn['cut_off_silence_ms']:.0f} ms into a {turn['cut_off_pause_ms']:.0f} ms pause"
            if turn["cut_off_text"]:
                cut += f": {turn['cut_off_text']!r}"
            if turn["spoke_at_ms"] is not None:
                cut += f"; its voice reached the user {turn['spoke_at_ms']:.0f} ms into the turn"
            lines.append(
                f"| {turn['name']} | {pauses} | {cut} | {bench._ms(turn['voice_to_voice_ms'])} "
                f"| {bench._ms(turn['endpoint_ms'])} | {turn['transcript'] or ''} |"
            )
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in result["points"] if p["summary"]["false_cutoff_rate"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ys = [100 * p["summary"]["false_cutoff_rate"] for p in points]
    p50 = [p["summary"]["endpoint_ms"]["p50"] for p in points]
    p95 = [p["summary"]["endpoint_ms"]["p95"] for p in points]
    for y, low, high in zip(ys, p50, p95):
        if low is not None and high is not None:
            ax.plot([low, high], [y, y], color="lightgrey", zorder=1)
    ax.plot(p50, ys, marker="o", linestyle="none", label="server endpoint delay, median", zorder=2)
    ax.plot(p95, ys, marker="s", linestyle="none", label="server endpoint delay, p95", zorder=2)
    for index, (x, y, point) in enumerate(zip(p50, ys, points)):
        if x is not None:  # alternate above and below, so that points at one rate stay readable
            offset = (5, 6) if index % 2 == 0 else (5, -12)
            ax.annotate(point["name"], (x, y), textcoords="offset points", xytext=offset, fontsize=8)
    ax.axhline(5, color="grey", linestyle=":", label="issue bar: 5 %")
    ax.set_xlabel("delay after the true end of the turn (ms)")
    ax.set_ylabel("false cut-offs (% of turns with a mid-turn pause)")
    ax.set_title("Turn-detection thresholds: complete / no hint / incomplete silence (ms)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
