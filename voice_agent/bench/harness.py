"""What every benchmark shares: a local server, its resident memory and loop lag, the machine, the report.

A benchmark module (``latency``, ``load``, ``endpointing``, ``bargein``) defines
``add_arguments(parser)`` and ``run(args)``; ``voice-agent bench NAME`` gives
``run`` two more attributes on ``args``: ``serve_args`` (what followed ``--``,
or any option the benchmark does not know, for ``voice-agent serve``) and
``command_line`` (the command as typed, for the report).

Exit status of a benchmark: 0 passed, 1 a threshold missed, 2 the run failed.
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..protocols.telephony import SAMPLE_RATE as TELEPHONY_RATE
from ..replay.local_server import LocalServer, ServerNotReady
from ..replay.measure import distribution
from ..replay.report import Thresholds, build
from ..replay.report import machine as replay_machine
from ..replay.runner import Options, RunTrace, analyse, run_level
from ..replay.script import Script

# The turn scripts and their audio are package data (turns/*_turns), so an installed wheel has them; pip
# installs a package unpacked, so they are files a path can name.
TURNS = Path(str(resources.files(__package__).joinpath("turns")))
# The folder this voice_agent is imported from (a checkout, or site-packages): the server and the replay
# processes import this same copy, not another one installed in the environment.
IMPORT_ROOT = Path(__file__).resolve().parents[2]

EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_ERROR = 2

READY_TIMEOUT_S = 300
LEVEL_TIMEOUT_S = 1800  # one level may take long on a slow machine, but never forever
REPLAY_TIMEOUT_S = 900  # one in-process replay, bounded whatever the server does
GAP_MS = 300  # silence between an answer and the next turn: the agent is idle by then
SAMPLE_S = 0.25
# The wire protocols a benchmark replays over: each one's path on `voice-agent serve`, and the rate its audio
# goes at. Over twilio the turns are heard as a caller's: 8 kHz μ-law, a phone line's band.
TRANSPORTS = {
    "native": ("/ws", 16000),
    "twilio": ("/twilio", TELEPHONY_RATE),
    "realtime": ("/v1/realtime", 24000),
}


def default_script(folder: str) -> str:
    """The packaged turn script in FOLDER, e.g. ``bench_turns``."""
    return str(TURNS / folder / "script.yaml")


def add_common_arguments(parser: argparse.ArgumentParser, kind: str, turns: str, repeats_help: str) -> None:
    """--script, -n/--repeats and --out, the same in every benchmark."""
    parser.add_argument(
        "--script", default=default_script(turns), help=f"turn script [default the packaged {turns}/script.yaml]"
    )
    parser.add_argument("-n", "--repeats", type=int, default=1, help=f"{repeats_help} [default %(default)s]")
    parser.add_argument("--out", help=f"output folder [default artifacts/{kind}/<date-time>]")


def add_transport_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transport",
        choices=sorted(TRANSPORTS),
        default="native",
        help="wire protocol to replay the turns over, at its own rate (twilio: 8 kHz μ-law, as a phone call) "
        "[default %(default)s]",
    )


def add_noise_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--noise-floor",
        type=float,
        metavar="DBFS",
        help="a steady noise floor under everything the client sends, as a room or a phone line adds: pink "
        "noise at this RMS level, e.g. -50 (a quiet room) or -40 (a noisy one) [default none]",
    )


def transport_rate(transport: str) -> int:
    """The sample rate a benchmark's turns go at over ``transport``."""
    return TRANSPORTS[transport][1]


def output_folder(out: str | None, kind: str) -> Path:
    """``out``, or artifacts/KIND/<date-time> in the current directory; created, as an absolute path."""
    folder = Path(out) if out else Path("artifacts", kind, datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()


def same_package_env() -> dict[str, str]:
    """The environment for a ``python -m voice_agent`` child that imports this copy of the package."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([str(IMPORT_ROOT), path] if path else [str(IMPORT_ROOT)])}


@contextlib.contextmanager
def local_server(serve_args: Sequence[str], log_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`voice-agent serve` on a free loopback port, ready, until the block ends: (process, WebSocket URL).

    The server's output goes to ``log_path``; it is stopped in every case.
    """
    with open(log_path, "w") as log:
        try:
            server = LocalServer(list(serve_args), log, env=same_package_env(), ready_timeout=READY_TIMEOUT_S)
        except ServerNotReady as exc:
            raise SystemExit(f"{exc}; see {log_path}") from None
        print(f"started the server: {shlex.join(server.command)}", file=sys.stderr)
        with server:
            yield server.process, server.ws_url


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """VmRSS (now) or VmHWM (peak since start) of a process, in MiB; None off Linux."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


class ServerSampler(threading.Thread):
    """While a run goes on: the server's resident memory every ``every_s`` and, given
    ``healthz``, how long /healthz takes to answer. /healthz does no work, so its
    time is the server's event-loop lag, which its own latency metrics cannot see:
    they are stamped when the loop gets to a frame, not when the frame arrived."""

    def __init__(self, pid: int, healthz: str | None = None, every_s: float = SAMPLE_S):
        super().__init__(daemon=True)
        self.pid = pid
        self.healthz = healthz
        self.every_s = every_s
        self.rss: list[tuple[float, float]] = []  # (seconds since start, MiB)
        self.lags: list[float] = []
        self._stopping = threading.Event()
        self._origin = time.monotonic()

    @property
    def peak_mb(self) -> float | None:
        return max((mb for _, mb in self.rss), default=None)

    def lag_ms(self) -> dict:
        return distribution(self.lags)

    def run(self) -> None:
        while True:
            rss = rss_mb(self.pid)
            if rss is not None:
                self.rss.append((round(time.monotonic() - self._origin, 1), rss))
            if self.healthz is not None:
                started = time.monotonic()
                try:
                    with urllib.request.urlopen(self.healthz, timeout=30):
                        self.lags.append((time.monotonic() - started) * 1000)
                except OSError:
                    pass
            if self._stopping.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def replay_level(level: int, *, script: str, repeats: int, url: str, out: Path, server: subprocess.Popen) -> dict:
    """`voice-agent replay` of ``script`` at ``level`` concurrent sessions, in a process of its own,
    with the server's memory and loop lag sampled meanwhile; the replay's files go to OUT/sessions-LEVEL."""
    level_out = out / f"sessions-{level}"
    command = [sys.executable, "-m", "voice_agent", "replay", "--url", url, "--script", script]
    command += ["--sessions", str(level), "-n", str(repeats), "--out", str(level_out)]
    print(f"\n== {level} concurrent session(s) ==", file=sys.stderr)
    sampler = ServerSampler(server.pid, url.replace("ws://", "http://").replace("/ws", "/healthz"))
    sampler.start()
    started = time.monotonic()
    try:
        status = subprocess.run(command, env={**os.environ, **same_package_env()}, timeout=LEVEL_TIMEOUT_S).returncode
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


@dataclass
class Replayed:
    traces: list[RunTrace]
    runs: list[dict]  # the replay report's runs
    failure: str | None
    seconds: float
    report: str  # file name of the replay report, in the output folder


def replay_locally(
    slug: str,
    serve_args: Sequence[str],
    script: Script,
    repeats: int,
    reply_timeout: float,
    out: Path,
    echo_seed: int | None = None,
    transport: str = "native",
    echo_paths: str = "call",
    echo_room: str = "small",
    noise_dbfs: float | None = None,
) -> Replayed:
    """A fresh local server with ``serve_args``; ``script`` replayed ``repeats`` times in one session,
    in this process, so that the caller gets the raw traces. ``echo_seed``: with the echo rig
    (``replay/echo.py``), the agent's audio comes back into the microphone, through ``echo_room`` on one path
    for the call or one per answer (``echo_paths``).

    Writes server-SLUG.log and the replay's own report, replay-SLUG.json.
    """
    started = time.monotonic()
    failure = None
    traces: list[RunTrace] = []
    with local_server(serve_args, out / f"server-{slug}.log") as (_, url):
        try:
            url = url.removesuffix(TRANSPORTS["native"][0]) + TRANSPORTS[transport][0]
            options = Options(
                url,
                transport,
                reply_timeout_s=reply_timeout,
                echo_seed=echo_seed,
                echo_paths=echo_paths,
                echo_room=echo_room,
                noise_dbfs=noise_dbfs,
            )
            traces = asyncio.run(_replay(script, options, repeats))
        except TimeoutError:
            failure = f"the replay took longer than {REPLAY_TIMEOUT_S} s"
    runs = [analyse(trace) for trace in traces]
    failure = failure or next((run["failure"] for run in runs if run["failure"]), None)
    report = build(
        script=script,
        url=url,
        transport=transport,
        options={"sessions": [1], "repeats": repeats},
        runs=runs,
        thresholds=Thresholds(),
    )
    report_path = out / f"replay-{slug}.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return Replayed(traces, runs, failure, round(time.monotonic() - started, 1), report_path.name)


async def _replay(script: Script, options: Options, repeats: int) -> list[RunTrace]:
    from tqdm import tqdm

    with tqdm(total=repeats * len(script.turns), unit="turn", file=sys.stderr, dynamic_ncols=True) as progress:

        def step() -> None:
            progress.update(1)

        return await asyncio.wait_for(run_level(script, options, 1, repeats, 0.0, step), REPLAY_TIMEOUT_S)


def machine() -> dict:
    """The replay report's machine facts plus memory and system."""
    info = replay_machine()
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    info["system"] = platform.system()
    return info


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def started(command_line: str) -> dict:
    """The head of every benchmark's JSON result: when, what, where, and how busy the machine was."""
    return {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line,
        "machine": machine(),
        "load_average_before": load_average(),
    }


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


def machine_line(result: dict) -> str:
    """The first line of every report table: the machine, how busy it was, when."""
    m = result["machine"]
    load = f"load average {result['load_average_before']} before"
    if "load_average_after" in result:
        load += f", {result['load_average_after']} after"
    return f"Machine: {m['processor']}, {m['cpus']} CPUs, {m.get('memory_gib', '?')} GiB; {load}; {result['created']}."


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> list[str]:
    """A markdown table. ``align`` has an ``l`` or ``r`` per column; by default the first
    column (a name) aligns left and the rest (figures) right."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "".join("---|" if a == "l" else "---:|" for a in align)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def finish(
    out: Path, name: str, result: dict, report: str, failures: Sequence[str] = (), error: str | None = None
) -> int:
    """Write NAME.json and NAME.md to ``out``, print the report and what failed; the exit status."""
    result["failures"] = list(failures)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{name}.md").write_text(report + "\n")
    print(report)
    print(f"\nwritten to {out}", file=sys.stderr)
    if error:
        print(f"the run failed: {error}", file=sys.stderr)
        return EXIT_ERROR
    for failure in failures:
        print(f"threshold missed: {failure}", file=sys.stderr)
    return EXIT_THRESHOLD if failures else EXIT_OK
