"""`voice-agent bench`: the dispatcher, the shared harness and each benchmark's checks and tables, without a server."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from voice_agent.bench import bargein, command, endpointing, harness, latency, load
from voice_agent.cli import main as cli_main
from voice_agent.replay.measure import distribution
from voice_agent.replay.script import ScriptError, load_script
from voice_agent.replay.turn_groups import waits

MACHINE_HEAD = {
    "created": "2026-11-22T20:00:00+00:00",
    "command": "voice-agent bench x",
    "machine": {"processor": "CPU", "cpus": 2, "memory_gib": 24.0},
    "load_average_before": [1.0, 1.0, 1.0],
}


def test_serve_arguments_are_those_after_the_first_double_dash():
    assert command.split_serve_arguments(["-n", "2", "--", "--llm-max-tokens", "60", "--", "x"]) == (
        ["-n", "2"],
        ["--llm-max-tokens", "60", "--", "x"],
    )
    assert command.split_serve_arguments(["-n", "2"]) == (["-n", "2"], [])


@pytest.fixture
def fake_benchmark(monkeypatch):
    """A benchmark module named `latency` that records the arguments it was run with."""
    seen: list[argparse.Namespace] = []

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sessions", default="1")
        parser.add_argument("-n", "--repeats", type=int, default=1)

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 7

    module = types.SimpleNamespace(__doc__="Fake.", add_arguments=add_arguments, run=run)
    real_import = command.importlib.import_module
    monkeypatch.setattr(
        command.importlib, "import_module", lambda name: module if name.endswith(".latency") else real_import(name)
    )
    return seen


def test_the_cli_hands_the_benchmark_its_options_and_the_server_the_rest(fake_benchmark):
    status = cli_main(["bench", "latency", "--sessions", "1,2", "--llm-temperature", "0", "--", "--port", "9"])
    assert status == 7
    (args,) = fake_benchmark
    assert args.sessions == "1,2" and args.repeats == 1
    # An option the benchmark does not know goes to the server, like one after --.
    assert args.serve_args == ["--llm-temperature", "0", "--port", "9"]
    assert args.command_line == "voice-agent bench latency --sessions 1,2 --llm-temperature 0 -- --port 9"


def test_a_missing_benchmark_module_is_named_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(command, "summary", lambda name: None)
    assert command.run("answers", []) == 2
    assert "voice_agent.bench.answers is missing" in capsys.readouterr().err


def test_the_help_lists_every_benchmark_with_its_docstring_line_and_imports_none():
    code = (
        "import sys, contextlib, io\n"
        "from voice_agent.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['bench', '-h'])\n"
        "print(out.getvalue())\n"
        "print('imported:', sorted(m for m in sys.modules if m.startswith('voice_agent.bench.') and m != 'voice_agent.bench.command'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert "imported: []" in done.stdout
    for name in ("latency", "load", "endpointing", "bargein"):
        line = command.summary(name)
        assert line and f"{name:<12} {line}" in done.stdout
    assert "answers" in done.stdout


def test_every_benchmark_has_the_interface():
    for module in (latency, load, endpointing, bargein):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        args = parser.parse_args([])
        assert args.script.endswith("script.yaml") and os.path.exists(args.script), module.__name__
        assert callable(module.run)
        assert module.__doc__.split("\n", 1)[0].endswith(".")


def test_table_aligns_names_left_and_figures_right():
    assert harness.table(["name", "p50"], [["a", "1 ms"]]) == ["| name | p50 |", "|---|---:|", "| a | 1 ms |"]
    assert harness.table(["a", "b", "c"], [], "lrl")[1] == "|---|---:|---|"


def test_finish_writes_both_files_and_maps_failures_to_exit_status(tmp_path, capsys):
    assert harness.finish(tmp_path, "x", {"a": 1}, "report") == harness.EXIT_OK
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1, "failures": []}
    assert (tmp_path / "x.md").read_text() == "report\n"
    assert harness.finish(tmp_path, "x", {}, "report", ["p95 too slow"]) == harness.EXIT_THRESHOLD
    assert "threshold missed: p95 too slow" in capsys.readouterr().err
    assert harness.finish(tmp_path, "x", {}, "report", ["p95 too slow"], error="no server") == harness.EXIT_ERROR


def test_rss_of_this_process_is_read_from_proc():
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc")
    assert harness.rss_mb(os.getpid()) > 1
    assert harness.rss_mb(os.getpid(), "VmHWM") >= harness.rss_mb(os.getpid())
    assert harness.rss_mb(2**30) is None


def test_sampler_records_memory_until_stopped():
    sampler = harness.ServerSampler(os.getpid(), every_s=0.01)
    sampler.start()
    sampler.stop()
    assert sampler.peak_mb is not None and sampler.lag_ms()["n"] == 0


def test_sweep_points_become_threshold_flags():
    assert endpointing._points("350/600/2000") == [
        (
            "350/600/2000",
            ["--end-silence-complete-ms", "350", "--end-silence-ms", "600", "--end-silence-incomplete-ms", "2000"],
        )
    ]
    assert len(endpointing._points(endpointing.SWEEP)) == 7
    with pytest.raises(ScriptError):
        endpointing._points("350/600")


def _endpoint_point(rate: float | None, elsewhere: int = 0) -> dict:
    summary = {
        "false_cutoff_rate": rate,
        "false_cutoffs": 1,
        "paused_turns": 4,
        "spoke_in_pause": 0,
        "cutoffs_elsewhere": elsewhere,
        "endpoint_ms": distribution([400.0]),
        "voice_to_voice_ms": distribution([900.0]),
        "final_transcript_ms": distribution([300.0]),
        "unanswered": 0,
        "by_tag": {"hesitation": {"turns": 2, "cut_off": 1}},
    }
    turn = {
        "name": "go_to_boston",
        "pauses_ms": [800.0],
        "cut_off": "answer",
        "cut_off_pause_ms": 800.0,
        "cut_off_silence_ms": 620.0,
        "cut_off_text": "I want to go to.",
        "spoke_at_ms": None,
        "voice_to_voice_ms": None,
        "endpoint_ms": None,
        "transcript": "I want to go to Boston.",
        "tags": ["group:words"],
        "overlap_ms": 240.0,
    }
    group = {
        **summary,
        "turns": 4,
        "heard_in_pause": 1,
        "heard_in_pause_rate": 0.25,
        "overlap_ms": distribution([240.0]),
        "overlap_ms_total": 240.0,
        "wait_ms": waits([400.0, 600.0]),
    }
    return {"name": "server defaults", "failure": None, "summary": summary, "groups": {"words": group}, "turns": [turn]}


def test_endpointing_threshold_and_table():
    result = {**MACHINE_HEAD, "load_average_after": None, "points": [_endpoint_point(0.25)]}
    assert endpointing.check(result, 0.05) == ["false cut-off rate 25.0% > 5.0% (or 0 cut-off(s) outside the pauses)"]
    assert endpointing.check(result, 0.3) == []
    assert endpointing.check(result, None) == []
    assert endpointing.check({"points": [_endpoint_point(0.0, elsewhere=1)]}, 0.05)
    report = endpointing.markdown(result)
    assert "| server defaults | 1/4 (25%) | 0 | 0 | 400 ms |" in report
    assert "| server defaults | 1/2 |" in report  # cut-offs by tag
    assert "620 ms into a 800 ms pause: 'I want to go to.'" in report
    # Cut-ins beside the wait at the ends of the turns not cut into.
    row = "| server defaults | words | 4 | 1/4 | 1/4 (25%) | 2 | 500 ms | 500 ms | 580 ms | 240 ms | 240 ms | 900 ms |"
    assert row in report
    assert "| words | go_to_boston | 800 |" in report and "| 240 ms |" in report
    assert endpointing.check(result, None, 0.1) == [
        "words: the agent's voice reached the user in a mid-turn pause in 1/4 paused turns (25% > 10%)"
    ]
    assert endpointing.check(result, None, 0.25) == []


def _probe_summary(cleared_noise: int, stop_p95: float | None) -> dict:
    return {
        "interruption": {
            "probes": 2,
            "judged": 2,
            "outcomes": {"cleared": 2},
            "stop_ms": {"p50": 300.0, "p95": stop_p95, "max": stop_p95},
            "clear_ms": {"p50": 320.0, "p95": 400.0},
        },
        "noise": {
            "probes": 3,
            "judged": 3,
            "outcomes": {"cleared": cleared_noise, "kept talking": 3 - cleared_noise},
            "stop_ms": {"p50": None, "p95": None, "max": None},
            "clear_ms": {"p50": None, "p95": None},
        },
    }


def test_bargein_thresholds_and_table():
    assert bargein.check(_probe_summary(0, 350.0), 400, 0) == []
    assert bargein.check(_probe_summary(1, 450.0), 400, 0) == [
        "interruption stop time p95 450 ms > 400 ms",
        "1 false barge-in(s) > 0",
    ]
    assert bargein.check(_probe_summary(1, 450.0), None, None) == []
    result = {**MACHINE_HEAD, "load_average_after": None, "summary": _probe_summary(1, 450.0), "probes": []}
    report = bargein.markdown(result)
    assert "| noise | 3 | 1 | 0 | 0 | 2 | 0 | – |" in report
    assert "False barge-ins (a noise or an acknowledgement made the agent give up its answer): 1." in report
    assert "Echo rig" not in report  # a result without the echo section


def test_bargein_echo_section_and_threshold():
    echo = {"on": True, "seed": 3, "clears": 1, "pauses": 0, "stopped": 0, "turns": 1, "stops": 2, "cut_ins": 1}
    echo |= {"script_turns": 4, "user_turns": 6, "voice_stretch_ms": distribution([400.0, 500.0])}
    echo |= {"drawn_per": "call", "room": "reverberant"}
    echo["runs"] = [{"repeat": 0, "paths": [{"at_s": 1.0, "gain_db": -12.0, "delay_ms": 80.0, "seed": 5}]}]
    assert bargein.check_echo(echo, 0) == [
        "2 stop(s) outside the user's own sound > 0 (1 clear(s), 0 pause(s), 0 stopped, 1 user turn(s))"
    ]
    assert bargein.check_echo(echo, 2) == [] and bargein.check_echo(echo, None) == []
    result = {**MACHINE_HEAD, "load_average_after": None, "summary": {}, "probes": [], "echo": echo}
    assert (
        "Echo rig on (seed 3, a reverberant room, a path drawn per call): 1 path(s) at -12 to -12 dB, 80 to 80 ms "
        "late. Stops for the agent's own "
        "voice: 2 (1 clear(s), 0 pause(s) of its voice, 0 answer(s) stopped without a clear, 1 user turn(s) it "
        "heard in its own voice). It began to talk in 1 of the user's turns, at a pause. It took 6 user turns for "
        "the script's 4; its voice played in stretches of 450 ms "
        "(median of 2)."
    ) in bargein.markdown(result)


def _level(sessions: int, p50: float | None, failed: int = 0) -> dict:
    summary = None
    if p50 is not None:
        figure = distribution([p50])
        summary = {
            "turns": 10,
            "voice_to_voice_ms": figure,
            "server_voice_to_voice_ms": figure,
            "client_minus_server_ms": distribution([20.0]),
            "final_transcript_ms": figure,
            "barge_in_stop_ms": distribution([]),
            "unanswered": 0,
            "failed_runs": failed,
            "dry_spells_ms": distribution([]),
        }
    return {
        "sessions": sessions,
        "exit_status": 0 if summary else 2,
        "summary": summary,
        "server_peak_rss_mb": 700.0,
        "server_loop_lag_ms": distribution([3.0]),
    }


def test_latency_table_has_a_row_per_level_and_marks_a_failed_one():
    report = latency.markdown({**MACHINE_HEAD, "levels": [_level(1, 450.0), _level(2, None)]})
    assert "| 1 | 10 | 450 ms | 450 ms | 450 ms |" in report
    assert "| 2 | failed (exit 2) |" in report
    assert report.startswith("Machine: CPU, 2 CPUs, 24.0 GiB; load average [1.0, 1.0, 1.0] before;")


def test_load_bars():
    estimate = {"session_cost": 0.35, "idle_cost": 0.02, "cores": 2, "default_target": 0.8}
    estimate["sessions_at_default_target"] = 4
    ramp = {"levels": [_level(1, 450.0)], "budget_ms": 1000.0, "within_budget_sessions": 1, "failed_runs": 0}
    ok = {"ramp": {**ramp, "server_estimate": estimate}}
    assert load.failures(ok) == []
    flood = {"failed_runs": 0, "increase": 0.3, "rounds": [], "alone_p50_ms": 400.0, "beside_garbage_p50_ms": 520.0}
    soak = {"failed_runs": 1, "rss_drift": -0.12}
    assert load.failures({**ok, "flood": flood, "soak": soak}) == [
        "beside garbage +30% slower > +20%",
        "1 soak run(s) failed",
        "soak RSS drift -12.0% > ±10%",
    ]
    report = load.markdown({**MACHINE_HEAD, **ok, "flood": flood})
    assert "within the 1000 ms budget (median client voice-to-voice): 1." in report
    assert "The server's own estimate: 4 at --capacity-target 0.8 (a session measured at 0.35 core-s/s" in report
    assert "beside a client sending 0 malformed messages (+30 %" in report


def test_endpointing_groups_from_the_command_line(tmp_path):
    default = harness.default_script("endpoint_turns")

    def script(path: str, group: str, limit: int | None, transport: str = "native"):
        return endpointing._script(argparse.Namespace(script=path, group=group, limit=limit, transport=transport))

    chosen = script(default, "words, real", 1)
    assert [t.tags[-1] for t in chosen.turns] == ["group:words", "group:real"]
    assert chosen.rate == 16000 and script(default, "real", 1, "twilio").rate == 8000  # a phone line's
    with pytest.raises(ScriptError, match="choose from synthetic, words, real"):
        script(default, "real,bogus", None)
    own = tmp_path / "own.yaml"
    own.write_text(f"turns:\n  - file: {harness.TURNS / 'endpoint_turns' / 'yes.flac'}\n")
    [turn] = script(str(own), "real", None).turns
    assert turn.tags == ("group:script",)


def test_the_knee_is_the_last_level_within_budget_before_the_first_over_it(monkeypatch):
    medians = {1: 500.0, 2: 800.0, 3: 1200.0, 4: 900.0}
    run: list[int] = []

    def level(n: int, *args: object) -> dict:
        run.append(n)
        return _level(n, medians[n])

    monkeypatch.setattr(load, "_level", level)
    monkeypatch.setattr(load, "server_estimate", lambda url: None)
    args = argparse.Namespace(budget_ms=1000.0, all_levels=False)
    assert load.ramp([1, 2, 3, 4], args, "ws://x/ws", Path("out"), None)["within_budget_sessions"] == 2  # type: ignore[arg-type]
    assert run == [1, 2, 3]
    args.all_levels = True
    assert load.ramp([1, 2, 3, 4], args, "ws://x/ws", Path("out"), None)["within_budget_sessions"] == 2  # type: ignore[arg-type]


def test_the_default_turn_scripts_are_package_data_and_load_with_their_audio(tmp_path, monkeypatch):
    package = Path(harness.__file__).resolve().parent
    for folder in ("bench_turns", "bargein_turns", "endpoint_turns"):
        path = Path(harness.default_script(folder))
        assert path.is_relative_to(package)
        assert load_script(str(path), 16000).turns  # every turn's audio read
    monkeypatch.chdir(tmp_path)
    assert harness.output_folder(None, "x").is_relative_to(tmp_path)  # under the current directory, not the package
