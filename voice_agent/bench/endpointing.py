"""Endpointing eval: false cut-offs in mid-turn pauses and delay after true turn ends, through a local server.

Starts `voice-agent serve` with the embedded default models on a free loopback
port, replays the endpointing turns through it with the replay client, one
session at real-time pace, and reports the false cut-off rate (the agent took
the turn during a mid-turn pause) and the delay after the true end of each turn
(client voice-to-voice, the server's endpoint_ms, the final transcript).

The turns come in groups (``replay/turn_groups.py``), each reported apart:
``synthetic`` (voice_agent/bench/turns/endpoint_turns: parts synthesized apart, mid-turn pauses
of 0.3 to 1.5 s, and whole short answers), ``words`` (the same pauses cut in
at a word boundary of a whole utterance), ``real`` (AMI meeting speech and
JFK) and ``phone`` (the AMI turns through 8 kHz μ-law, as a phone call). Pauses are those the pipeline's Silero VAD hears (``replay/vad_pauses.py``);
per group, how often the agent's voice reached the user in one and how much of
it they heard (``overlap_ms``).

With --sweep, does that once per set of turn-detection thresholds
(--end-silence-complete-ms / --end-silence-ms / --end-silence-incomplete-ms),
one fresh server each, and draws the curve of false cut-offs against delay.

Writes artifacts/endpointing/<date-time>/: endpoint.json, endpoint.md, per
point the replay report and server log, and with --sweep sweep.png.
See docs/turn-taking.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from ..replay import endpointing, turn_groups, vad_pauses
from ..replay.measure import send_time
from ..replay.runner import RunTrace
from ..replay.script import Script, ScriptError, load_script
from . import harness
from .harness import ms

# The next turn starts once the answer to the last one has played, so long
# answers only make the eval slow: endpointing happens before the first word.
EVAL_SERVE_ARGS = ["--llm-max-tokens", "8"]
# complete / no hint / incomplete silences in ms, from eager to patient; 350/600/2000 are the defaults.
SWEEP = "200/400/800,350/600/1200,350/600/2000,500/800/1600,700/1000/2000,900/1200/2000,600/600/600"
THRESHOLD_FLAGS = ("--end-silence-complete-ms", "--end-silence-ms", "--end-silence-incomplete-ms")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    harness.add_common_arguments(parser, "endpointing", "endpoint_turns", "script repeats per point")
    harness.add_transport_argument(parser)
    harness.add_noise_argument(parser)
    parser.add_argument(
        "--sweep",
        nargs="?",
        const=SWEEP,
        help="sweep the turn thresholds: comma list of COMPLETE/DEFAULT/INCOMPLETE ms, one server each "
        f"[without a value: {SWEEP}]",
    )
    parser.add_argument(
        "--group",
        default=",".join(turn_groups.GROUPS),
        help=f"groups of turns to play, a comma list of {', '.join(turn_groups.GROUPS)} [default all]; "
        "a --script of your own is played alone instead",
    )
    parser.add_argument(
        "--limit", type=int, help="play only the first N turns of each group (paused turns come first), e.g. in CI"
    )
    parser.add_argument(
        "--reply-timeout", type=float, default=15.0, help="seconds to wait for an answer [default %(default)s]"
    )
    parser.add_argument(
        "--max-heard-in-pause",
        type=float,
        help="exit 1 if in any group the agent's voice reached the user during a mid-turn pause in more than "
        "this share of its paused turns (e.g. 0.1); not with --sweep",
    )
    parser.add_argument(
        "--max-false-cutoff",
        type=float,
        help="exit 1 if the false cut-off rate is above this (e.g. 0.05); not with --sweep",
    )


def run(args: argparse.Namespace) -> int:
    try:
        points = _points(args.sweep) if args.sweep else [("server defaults", [])]
        if args.sweep and (args.max_false_cutoff is not None or args.max_heard_in_pause is not None):
            raise ScriptError("--max-false-cutoff and --max-heard-in-pause check one configuration: leave out --sweep")
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        if args.limit is not None and args.limit < 1:
            raise ScriptError("--limit must be at least 1")
        script = _script(args)
    except ScriptError as exc:
        print(f"voice-agent bench endpointing: {exc}", file=sys.stderr)
        return harness.EXIT_ERROR
    out = harness.output_folder(args.out, "endpointing")

    result = harness.started(args.command_line)
    result["script"] = script.source
    result["transport"] = args.transport
    result["noise_dbfs"] = args.noise_floor
    result["serve_args"] = EVAL_SERVE_ARGS + args.serve_args
    result["points"] = [
        _run_point(name, point_args + args.serve_args, script, args, out) for name, point_args in points
    ]
    result["load_average_after"] = harness.load_average()
    if len(points) > 1:
        _plot(result, out / "sweep.png")

    failed = next((point["failure"] for point in result["points"] if point["failure"]), None)
    failures = check(result, args.max_false_cutoff, args.max_heard_in_pause)
    return harness.finish(out, "endpoint", result, markdown(result), failures, failed)


def _script(args: argparse.Namespace) -> Script:
    """The groups' turns, or a --script of one's own (as the group "script"); --limit turns of each."""
    rate = harness.transport_rate(args.transport)
    if args.script != harness.default_script("endpoint_turns"):
        script = load_script(args.script, rate, harness.GAP_MS)
        turns = script.turns if args.limit is None else script.turns[: args.limit]
        return Script(tuple(replace(t, tags=(*t.tags, turn_groups.TAG + "script")) for t in turns), rate, script.source)
    groups = [name.strip() for name in args.group.split(",") if name.strip()]
    unknown = [name for name in groups if name not in turn_groups.GROUPS]
    if unknown or not groups:
        raise ScriptError(f"--group {args.group!r}: choose from {', '.join(turn_groups.GROUPS)}")
    return turn_groups.load_groups(harness.TURNS / "endpoint_turns", groups, rate, harness.GAP_MS, args.limit)


def check(result: dict, max_false_cutoff: float | None, max_heard_in_pause: float | None = None) -> list[str]:
    failures = []
    point = result["points"][0]
    summary = point["summary"]
    if max_false_cutoff is not None and summary["false_cutoff_rate"] is not None:
        if summary["false_cutoff_rate"] > max_false_cutoff or summary["cutoffs_elsewhere"]:
            failures.append(
                f"false cut-off rate {summary['false_cutoff_rate']:.1%} > {max_false_cutoff:.1%}"
                f" (or {summary['cutoffs_elsewhere']} cut-off(s) outside the pauses)"
            )
    if max_heard_in_pause is not None:
        for name, group in point["groups"].items():
            rate = group["heard_in_pause_rate"]
            if rate is not None and rate > max_heard_in_pause:
                failures.append(
                    f"{name}: the agent's voice reached the user in a mid-turn pause in {group['heard_in_pause']}"
                    f"/{group['paused_turns']} paused turns ({rate:.0%} > {max_heard_in_pause:.0%})"
                )
    return failures


def _points(text: str) -> list[tuple[str, list[str]]]:
    points = []
    for part in text.split(","):
        values = part.strip().split("/")
        if len(values) != 3 or not all(v.isdigit() for v in values):
            raise ScriptError(f"--sweep point {part!r}: give COMPLETE/DEFAULT/INCOMPLETE in ms, e.g. 350/600/1200")
        args = [item for flag, value in zip(THRESHOLD_FLAGS, values) for item in (flag, value)]
        points.append(("/".join(values), args))
    return points


def _run_point(name: str, serve_args: list[str], script: Script, args: argparse.Namespace, out: Path) -> dict:
    print(f"\n== {name} ==", file=sys.stderr)
    slug = name.replace("/", "-").replace(" ", "-")
    replayed = harness.replay_locally(
        slug,
        EVAL_SERVE_ARGS + serve_args,
        script,
        args.repeats,
        args.reply_timeout,
        out,
        transport=args.transport,
        noise_dbfs=args.noise_floor,
    )
    threshold = _vad_threshold(serve_args)
    turns = [
        turn for trace, run in zip(replayed.traces, replayed.runs) for turn in endpoint_turns(trace, run, threshold)
    ]
    return {
        "name": name,
        "serve_args": EVAL_SERVE_ARGS + serve_args,
        "seconds": replayed.seconds,
        "failure": replayed.failure,
        "replay_report": replayed.report,
        "summary": endpointing.summarise(turns),
        "groups": turn_groups.summarise_groups(turns),
        "turns": turns,
    }


def _vad_threshold(serve_args: list[str]) -> float:
    """The server's --vad-threshold: the pauses that count are those its VAD hears."""
    for flag, value in zip(serve_args, serve_args[1:]):
        if flag == "--vad-threshold":
            return float(value)
    return Settings().vad_threshold


def endpoint_turns(trace: RunTrace, run: dict, vad_threshold: float) -> list[dict]:
    """The endpointing figures of each turn of one replayed run."""
    turns = []
    for sent, figures in zip(trace.turns, run["turns"]):
        frame = sent.frame_samples
        pauses_at = [
            (send_time(sent.frame_times, frame, start), send_time(sent.frame_times, frame, end - 1))
            for start, end in vad_pauses.pauses(sent.turn.audio, sent.turn.rate, vad_threshold)
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
                "overlap_ms": turn_groups.overlap_ms(trace.received, pauses_at),
                **measured,
            }
        )
    return turns


def markdown(result: dict) -> str:
    lines = [harness.machine_line(result), f"Command: `{result['command']}`", ""]
    header = [
        "thresholds (complete / no hint / incomplete)",
        "false cut-offs",
        "of which heard",
        "elsewhere",
        "endpoint p50",
        "p95",
        "voice-to-voice p50",
        "p95",
        "final transcript p50",
        "no answer",
    ]
    rows = []
    for point in result["points"]:
        s = point["summary"]
        rate = (
            "–"
            if s["false_cutoff_rate"] is None
            else f"{s['false_cutoffs']}/{s['paused_turns']} ({s['false_cutoff_rate']:.0%})"
        )
        rows.append(
            [
                point["name"],
                rate,
                s["spoke_in_pause"],
                s["cutoffs_elsewhere"],
                ms(s["endpoint_ms"]["p50"]),
                ms(s["endpoint_ms"]["p95"]),
                ms(s["voice_to_voice_ms"]["p50"]),
                ms(s["voice_to_voice_ms"]["p95"]),
                ms(s["final_transcript_ms"]["p50"]),
                str(s["unanswered"]) + (f" failed: {point['failure']}" if point["failure"] else ""),
            ]
        )
    lines += harness.table(header, rows)
    lines += [
        "",
        "By group, cut-ins beside the wait (cut in: the agent committed in a mid-turn pause; heard: its voice "
        "reached the user there; wait: the server's endpoint delay after the true end of the turns not cut into; "
        "overlap: how much of its voice they heard in a pause, over the turns where they did):",
        "",
    ]
    rows = []
    for point in result["points"]:
        for name, g in point["groups"].items():
            heard = (
                "–"
                if g["heard_in_pause_rate"] is None
                else f"{g['heard_in_pause']}/{g['paused_turns']} ({g['heard_in_pause_rate']:.0%})"
            )
            wait = g["wait_ms"]
            rows.append(
                [
                    point["name"],
                    name,
                    g["turns"],
                    f"{g['false_cutoffs']}/{g['paused_turns']}",
                    heard,
                    wait["n"],
                    ms(wait["mean"]),
                    ms(wait["p50"]),
                    ms(wait["p90"]),
                    ms(g["overlap_ms"]["p50"]),
                    ms(g["overlap_ms"]["max"]),
                    ms(g["voice_to_voice_ms"]["p50"]),
                ]
            )
    lines += harness.table(
        [
            "thresholds",
            "group",
            "turns",
            "cut in (of paused)",
            "heard in a pause",
            "answered after the end",
            "wait mean",
            "p50",
            "p90",
            "overlap p50",
            "max",
            "v2v p50",
        ],
        rows,
        "llrrrrrrrrrr",
    )
    # The groups have their own table above.
    tags = sorted(
        {tag for point in result["points"] for tag in point["summary"]["by_tag"] if not tag.startswith(turn_groups.TAG)}
    )
    if tags:
        lines += ["", "Cut-offs by kind of turn (tags in the turn script):", ""]
        rows = []
        for point in result["points"]:
            by_tag = point["summary"]["by_tag"]
            rows.append(
                [point["name"]] + [f"{by_tag[t]['cut_off']}/{by_tag[t]['turns']}" if t in by_tag else "–" for t in tags]
            )
        lines += harness.table(["thresholds", *tags], rows)
    for point in result["points"]:
        lines += ["", f"Turns at {point['name']}:", ""]
        rows = []
        for turn in point["turns"]:
            pauses = " ".join(f"{p:.0f}" for p in turn["pauses_ms"]) or "–"
            cut = turn["cut_off"] or ""
            if turn["cut_off_pause_ms"] is not None:
                cut += f" {turn['cut_off_silence_ms']:.0f} ms into a {turn['cut_off_pause_ms']:.0f} ms pause"
            if turn["cut_off_text"]:
                cut += f": {turn['cut_off_text']!r}"
            if turn["spoke_at_ms"] is not None:
                cut += f"; its voice reached the user {turn['spoke_at_ms']:.0f} ms into the turn"
            rows.append(
                [
                    turn_groups.group_of(turn["tags"]),
                    turn["name"],
                    pauses,
                    cut,
                    ms(turn["overlap_ms"]) if turn["overlap_ms"] else "",
                    ms(turn["voice_to_voice_ms"]),
                    ms(turn["endpoint_ms"]),
                    turn["transcript"] or "",
                ]
            )
        lines += harness.table(
            ["group", "turn", "pauses", "cut off", "overlap", "v2v", "endpoint", "transcript"], rows, "llllrrrl"
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
