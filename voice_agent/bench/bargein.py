"""Barge-in eval: interruptions, acknowledgements and noise bursts over the agent's answers, through a local server.

Starts `voice-agent serve` with the embedded default models on a free loopback
port, and replays voice_agent/bench/turns/bargein_turns through it, one session at real-time
pace: each question is followed, 800 ms into the agent's answer, by a probe:
an interruption (the agent must stop), an acknowledgement ("yeah", "mm-hmm")
or a non-speech noise burst (door slam, clicks, cough, knocks, hiss, laugh),
which must not stop it. Reports per kind of probe what the agent did and,
for interruptions, the stop time: from the start of the interrupting speech
to when a client playing the agent's audio fell silent.

With --echo, the echo rig (``replay/echo.py``) plays the agent's own output
back into its input, -10 to -25 dB down, 50 to 250 ms late, through a small or
a reverberant room (--echo-room), one path for the call or a new one for each
answer (--echo-paths), mixed with what the user sends: the report then counts what the
agent did about its own voice (``replay/echo_stops.py``: clears, pauses and
user turns outside the user's own windows). The same counts without --echo
are the baseline: a chunk that comes late also pauses the agent's voice.

Writes artifacts/bargein/<date-time>/: bargein.json, bargein.md, the replay
report and the server log. See docs/turn-taking.md.
"""

from __future__ import annotations

import argparse
import sys

from ..replay import bargein, echo_stops
from ..replay.echo import PATHS, ROOMS
from ..replay.measure import GLITCH_S, bridged, distribution, is_final_transcript, playback_intervals
from ..replay.runner import RunTrace
from ..replay.script import ScriptError, load_script
from . import harness
from .harness import ms

PROBE_TAGS = ("interruption", "acknowledgement", "noise")
OUTCOMES = ("cleared", "paused", "stopped", "kept talking", "not playing")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    harness.add_common_arguments(parser, "bargein", "bargein_turns", "script repeats")
    harness.add_transport_argument(parser)
    harness.add_noise_argument(parser)
    parser.add_argument(
        "--reply-timeout", type=float, default=15.0, help="seconds to wait for an answer [default %(default)s]"
    )
    parser.add_argument(
        "--echo",
        type=int,
        nargs="?",
        const=0,
        metavar="SEED",
        help="the echo rig: the agent hears its own output, through a room drawn with SEED [default 0]",
    )
    parser.add_argument(
        "--echo-paths",
        choices=PATHS,
        default="call",
        help="with --echo: one echo path for the call, as in a real room, or a new one for each answer "
        "[default %(default)s]",
    )
    parser.add_argument(
        "--echo-room",
        choices=ROOMS,
        default="small",
        help="with --echo: a small room (60 ms), or a reverberant one (400 ms, its tail louder than the direct "
        "sound) [default %(default)s]",
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
    thresholds.add_argument(
        "--max-echo-stops",
        type=int,
        help="clears, pauses, stopped answers and user turns outside the user's own sound "
        "(with --echo: for its own voice), e.g. 0",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.repeats < 1:
            raise ScriptError("-n must be at least 1")
        if args.echo is not None and args.transport != "native":
            # Its own voice is told from the server's transcripts and ends of answers, which a phone call lacks.
            raise ScriptError("--echo counts the agent's stops for its own voice over --transport native only")
        script = load_script(args.script, harness.transport_rate(args.transport), harness.GAP_MS)
    except ScriptError as exc:
        print(f"voice-agent bench bargein: {exc}", file=sys.stderr)
        return harness.EXIT_ERROR
    out = harness.output_folder(args.out, "bargein")

    result = harness.started(args.command_line)
    replayed = harness.replay_locally(
        "bargein",
        args.serve_args,
        script,
        args.repeats,
        args.reply_timeout,
        out,
        echo_seed=args.echo,
        transport=args.transport,
        echo_paths=args.echo_paths,
        echo_room=args.echo_room,
        noise_dbfs=args.noise_floor,
    )
    probes = [probe for trace in replayed.traces for probe in probe_results(trace)]
    result.update(
        {
            "load_average_after": harness.load_average(),
            "script": args.script,
            "transport": args.transport,
            "noise_dbfs": args.noise_floor,
            "serve_args": args.serve_args,
            "seconds": replayed.seconds,
            "failure": replayed.failure,
            "replay_report": replayed.report,
            "summary": bargein.summarise(probes),
            "probes": probes,
            "echo": {**echo_result(replayed.traces, args.echo), "drawn_per": args.echo_paths, "room": args.echo_room},
        }
    )
    failures = check(result["summary"], args.max_stop_p95_ms, args.max_false_barge_ins)
    failures += check_echo(result["echo"], args.max_echo_stops)
    return harness.finish(out, "bargein", result, markdown(result), failures, replayed.failure)


def probe_results(trace: RunTrace) -> list[dict]:
    """What the agent did about each probe of one replayed run."""
    results = []
    for index, sent in enumerate(trace.turns):
        tag = next((tag for tag in sent.turn.tags if tag in PROBE_TAGS), None)
        if tag is None:
            continue
        until = trace.turns[index + 1].speech_start_at if index + 1 < len(trace.turns) else float("inf")
        outcome = bargein.probe_outcome(trace.received, sent.speech_start_at, sent.speech_end_at, until=until)
        results.append({"name": sent.turn.name, "tag": tag, "repeat": trace.repeat, **outcome})
    return results


def echo_result(traces: list[RunTrace], seed: int | None) -> dict:
    """What the agent did outside the user's own sound, with the echo rig's paths when it was on.

    Times are seconds after the start of the run.
    """
    runs: list[dict] = []
    for trace in traces:
        turns = [(sent.speech_start_at, sent.speech_end_at, sent.turn.start.kind == "barge-in") for sent in trace.turns]
        stops = echo_stops.echo_stops(trace.received, turns)
        runs.append(
            {
                "repeat": trace.repeat,
                "paths": trace.echo_paths,
                **{kind: [round(at - trace.started_at, 3) for at in times] for kind, times in stops.items()},
                # How many user turns the agent answered for the turns the script played, and how
                # long each stretch of its voice lasted: its own echo adds turns and cuts stretches short.
                "script_turns": len(trace.turns),
                "user_turns": sum(1 for item in trace.received if is_final_transcript(item, "user")),
                "voice_stretches_ms": [
                    round((end - start) * 1000.0, 1)
                    for start, end in bridged(playback_intervals(trace.received), GLITCH_S)
                ],
            }
        )
    counts = {kind: sum(len(run[kind]) for run in runs) for kind in ("clears", "pauses", "stopped", "turns")}
    return {
        "on": seed is not None,
        "seed": seed,
        **counts,
        "stops": sum(counts.values()),
        # Not stops: the agent answered at a pause in a turn, and what it did about the rest was about the user.
        "cut_ins": sum(len(run["cut_ins"]) for run in runs),
        "script_turns": sum(run["script_turns"] for run in runs),
        "user_turns": sum(run["user_turns"] for run in runs),
        "voice_stretch_ms": distribution([stretch for run in runs for stretch in run["voice_stretches_ms"]]),
        "runs": runs,
    }


def check_echo(echo: dict, max_stops: int | None) -> list[str]:
    if max_stops is None or echo["stops"] <= max_stops:
        return []
    return [
        f"{echo['stops']} stop(s) outside the user's own sound > {max_stops} "
        f"({echo['clears']} clear(s), {echo['pauses']} pause(s), {echo['stopped']} stopped, "
        f"{echo['turns']} user turn(s))"
    ]


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
    echo = result.get("echo")
    if echo is not None:
        lines += ["", _echo_line(echo)]
    return "\n".join(lines)


def _echo_line(echo: dict) -> str:
    paths = [path for run in echo["runs"] for path in run["paths"]]
    if echo["on"]:
        gains = [path["gain_db"] for path in paths] or [0.0]
        delays = [path["delay_ms"] for path in paths] or [0.0]
        what = (
            f"Echo rig on (seed {echo['seed']}, a {echo.get('room', 'small')} room, a path drawn per "
            f"{echo.get('drawn_per', 'answer')}): {len(paths)} path(s) at {min(gains):.0f} to "
            f"{max(gains):.0f} dB, {min(delays):.0f} to {max(delays):.0f} ms late. Stops for the agent's own voice"
        )
    else:
        what = "Echo rig off. Stops outside the user's own sound (late chunks, or nothing)"
    stretch = echo["voice_stretch_ms"]
    p50 = ms(stretch["p50"])
    return (
        f"{what}: {echo['stops']} ({echo['clears']} clear(s), {echo['pauses']} pause(s) of its voice, "
        f"{echo['stopped']} answer(s) stopped without a clear, {echo['turns']} user turn(s) it heard in its own voice). "
        f"It began to talk in {echo['cut_ins']} of the user's turns, at a pause. "
        f"It took {echo['user_turns']} user turns for the script's {echo['script_turns']}; "
        f"its voice played in stretches of {p50} (median of {stretch['n']})."
    )
