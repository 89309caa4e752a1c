"""The latency benchmark behind scripts/bench: see docs/replay.md.

Starts `voice-agent serve` with the embedded default models on a free
loopback port, replays the fixed benchmark conversation (scripts/bench_turns)
at each concurrency level with `voice-agent replay`, samples the server's
resident memory while it runs, and writes everything to one folder:
bench.json, bench.md (the table for the README), server.log, and per level
the replay's report.json, timelines and histogram.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from voice_agent.replay.local_server import LocalServer, ServerNotReady

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_turns" / "script.yaml"
READY_TIMEOUT_S = 300
LEVEL_TIMEOUT_S = 1800  # one level may take long on a slow machine, but never forever
SAMPLE_S = 0.25


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Latency benchmark: a local server with the default models, replayed at several concurrency levels.",
        epilog="Arguments after -- go to `voice-agent serve`, e.g. scripts/bench -- --llm-max-tokens 60",
    )
    parser.add_argument("--sessions", default="1,2,4", help="concurrency levels [default %(default)s]")
    parser.add_argument("-n", "--repeats", type=int, default=1, help="script repeats per session [default %(default)s]")
    parser.add_argument("--script", default=str(SCRIPT), help="turn script [default scripts/bench_turns/script.yaml]")
    parser.add_argument("--out", help="output folder [default artifacts/bench/<date-time>]")
    args, serve_args = parser.parse_known_args()
    serve_args = [a for a in serve_args if a != "--"]
    levels = [int(level) for level in args.sessions.split(",")]
    out = Path(args.out or ROOT / "artifacts" / "bench" / datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)

    results = []
    with local_server(serve_args, out / "server.log") as (server, url):
        idle_rss = _rss_mb(server.pid, "VmRSS")
        for level in levels:
            results.append(_run_level(level, args, url, out, server))
        peak_rss = _rss_mb(server.pid, "VmHWM")

    bench = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["scripts/bench", *sys.argv[1:]]),
        "server_command": shlex.join(["voice-agent", "serve", *server.args[4:]]),
        "machine": _machine(),
        "load_average_before": _load_average(),
        "server_idle_rss_mb": idle_rss,
        "server_peak_rss_mb": peak_rss,
        "levels": results,
    }
    (out / "bench.json").write_text(json.dumps(bench, indent=2) + "\n")
    table = _markdown(bench)
    (out / "bench.md").write_text(table + "\n")
    print(table)
    print(f"\nwritten to {out}", file=sys.stderr)
    return 0 if all(level["exit_status"] in (0, 1) for level in results) else 1


def _run_level(level: int, args, url: str, out: Path, server: subprocess.Popen) -> dict:
    level_out = out / f"sessions-{level}"
    command = [
        sys.executable,
        "-m",
        "voice_agent",
        "replay",
        "--url",
        url,
        "--script",
        args.script,
        "--sessions",
        str(level),
        "-n",
        str(args.repeats),
        "--out",
        str(level_out),
    ]
    print(f"\n== {level} concurrent session(s) ==", file=sys.stderr)
    sampler = _ServerSampler(server.pid, url.replace("ws://", "http://").replace("/ws", "/healthz"))
    sampler.start()
    started = time.monotonic()
    try:
        status = subprocess.run(command, cwd=ROOT, timeout=LEVEL_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        status = 124
    finally:
        sampler.stop()
    report_path = level_out / "report.json"
    summary = json.loads(report_path.read_text())["summary"][str(level)] if report_path.exists() else None
    return {
        "sessions": level,
        "exit_status": status,
        "seconds": round(time.monotonic() - started, 1),
        "server_peak_rss_mb": sampler.peak_mb,
        "server_loop_lag_ms": sampler.lag_ms(),
        "report": str(report_path.relative_to(out)),
        "summary": summary,
    }


class _ServerSampler(threading.Thread):
    """While a level runs: the server's largest resident set, from /proc, and how
    long /healthz takes to answer. /healthz does no work, so its time is the
    server's event-loop lag, which its own latency metrics cannot see: they are
    stamped when the loop gets to a frame, not when the frame arrived."""

    def __init__(self, pid: int, healthz: str):
        super().__init__(daemon=True)
        self.pid = pid
        self.healthz = healthz
        self.peak_mb: float | None = None
        self.lags: list[float] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(SAMPLE_S):
            rss = _rss_mb(self.pid, "VmRSS")
            if rss is not None:
                self.peak_mb = max(self.peak_mb or 0.0, rss)
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.healthz, timeout=30):
                    self.lags.append((time.monotonic() - started) * 1000)
            except OSError:
                pass

    def lag_ms(self) -> dict:
        from voice_agent.replay.measure import distribution

        return distribution(self.lags)

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def _rss_mb(pid: int, field: str) -> float | None:
    """VmRSS (now) or VmHWM (peak since start) of a process, in MiB."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


@contextlib.contextmanager
def local_server(serve_args: list[str], log_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`voice-agent serve` on a free loopback port, ready, until the block ends: (process, WebSocket URL).

    The server's output goes to ``log_path``; it is stopped in every case.
    """
    with open(log_path, "w") as log:
        try:
            server = LocalServer(serve_args, log, cwd=ROOT, ready_timeout=READY_TIMEOUT_S)
        except ServerNotReady as exc:
            raise SystemExit(f"{exc}; see {log_path}") from None
        print(f"started the server: {shlex.join(server.command)}", file=sys.stderr)
        with server:
            yield server.process, server.ws_url


def _machine() -> dict:
    from voice_agent.replay.report import machine

    info = machine()
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    info["system"] = platform.system()
    return info


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _markdown(bench: dict) -> str:
    machine = bench["machine"]
    lines = [
        f"Machine: {machine['processor']}, {machine['cpus']} CPUs, {machine.get('memory_gib', '?')} GiB; "
        f"Python {machine['python']}; {bench['created']}.",
        f"Command: `{bench['command']}`",
        "",
        "| sessions | turns | voice-to-voice p50 | p95 | max | server v2v p50 | client − server p50 | final transcript p50 | barge-in stop p50 | no answer | player ran dry (n, max) | server peak RSS | event-loop lag p95 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in bench["levels"]:
        s = level["summary"]
        if s is None:
            lines.append(f"| {level['sessions']} | failed (exit {level['exit_status']}) | | | | | | | | | | | |")
            continue
        v2v = s["voice_to_voice_ms"]
        lines.append(
            f"| {level['sessions']} | {s['turns']} | {_ms(v2v['p50'])} | {_ms(v2v['p95'])} | {_ms(v2v['max'])} "
            f"| {_ms(s['server_voice_to_voice_ms']['p50'])} | {_ms(s['client_minus_server_ms']['p50'])} "
            f"| {_ms(s['final_transcript_ms']['p50'])} | {_ms(s['barge_in_stop_ms']['p50'])} | {s['unanswered']} "
            f"| {s['dry_spells_ms']['n']}, {_ms(s['dry_spells_ms']['max'])} "
            f"| {level['server_peak_rss_mb']} MiB | {_ms(level['server_loop_lag_ms']['p95'])} |"
        )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
