"""A local scale-out deployment: HAProxy in front of several gateways that share one LLM endpoint.

    clients ──► HAProxy (WebSocket, health checks on /readyz) ──► voice-agent serve × N ──► one LLM endpoint

Each gateway is a `voice-agent serve --llm openai --llm-url URL` on its own
loopback port (VAD, STT and TTS in process). The LLM endpoint is given
(``--llm http://host:port/v1``), or started here: ``vllm`` runs `vllm serve`
from ``.venv-vllm`` (scripts/setup-vllm), ``standin`` the embedded llama.cpp
model behind an OpenAI-compatible endpoint (voice_agent/engines/llm/standin_server.py),
which starts in seconds. HAProxy comes from the system (Debian's ``haproxy``
package). ``scripts/topology`` runs it until Ctrl-C; tests/test_topology.py
drains, restarts and cuts pieces of it. See docs/deployment.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from .replay.local_server import free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
READY_TIMEOUT_S = 300.0
# The header HAProxy adds to each response (the WebSocket handshake's too): which gateway took the connection.
GATEWAY_HEADER = "X-Gateway"


def haproxy_config(port: int, gateways: list[int], stats_port: int, host: str = "127.0.0.1") -> str:
    """HAProxy's configuration: WebSocket calls spread over ``gateways`` (their ports) by live connections."""
    servers = "\n".join(f"    server gw{i} {host}:{gw} check" for i, gw in enumerate(gateways, 1))
    return f"""\
global
    maxconn 4096

defaults
    mode http
    option forwardfor          # gateways see the caller's address, for --max-sessions-per-client
    option redispatch          # a connection a gateway refuses or drops (it is stopping) is tried on another
    retries 2
    retry-on conn-failure empty-response response-timeout
    timeout connect 2s
    timeout client 60s         # an HTTP request, or a WebSocket handshake
    timeout server 5s          # a gateway's answer to one (calls live under timeout tunnel)
    timeout tunnel 1h          # an upgraded WebSocket: a call may be quiet for a long time
    timeout client-fin 5s

frontend calls
    bind {host}:{port}
    default_backend gateways

backend gateways
    balance leastconn          # a call is one long connection: count them, not requests
    option httpchk GET /readyz # 503 while loading, draining, full or overloaded: no new calls
    http-check expect status 200
    default-server inter 1s fall 1 rise 2
    http-response set-header {GATEWAY_HEADER} %s
{servers}

frontend stats
    bind {host}:{stats_port}
    stats enable
    stats uri /stats
    stats refresh 5s
"""


class Topology:
    """The processes of one deployment; :meth:`close` stops every one of them (gateways with a drain)."""

    def __init__(
        self,
        folder: Path,
        *,
        gateways: int = 2,
        llm: str = "standin",
        port: int = 0,
        serve_args: list[str] | tuple[str, ...] = (),
        llm_args: list[str] | tuple[str, ...] = (),
        ready_timeout: float = READY_TIMEOUT_S,
    ):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.stats_port = free_port()
        self.gateway_ports = [free_port() for _ in range(gateways)]
        self.serve_args = list(serve_args)
        self.llm_args = list(llm_args)
        self.ready_timeout = ready_timeout
        self.llm = llm
        self.llm_port = 0 if llm.startswith(("http://", "https://")) else free_port()
        self.llm_url = llm if not self.llm_port else f"http://127.0.0.1:{self.llm_port}/v1"
        self.llm_process: subprocess.Popen | None = None
        self.gateways: list[subprocess.Popen | None] = [None] * gateways
        self.haproxy: subprocess.Popen | None = None
        self._logs: list[IO[str]] = []

    @property
    def url(self) -> str:
        """The balancer's base URL: ``ws://`` + this + ``/ws`` is a call."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def gateway_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.gateway_ports[index]}"

    def start(self) -> None:
        """The LLM, then every gateway at once, then the balancer; returns once HAProxy sees every gateway up."""
        try:
            self.start_llm()
            for index in range(len(self.gateways)):
                self.start_gateway(index, wait=False)
            for index in range(len(self.gateways)):
                self.wait_gateway(index)
            self.start_haproxy()
            for index in range(len(self.gateways)):
                self.wait_balancer(index, up=True)
        except BaseException:
            self.close()
            raise

    def start_llm(self) -> None:
        """Start the LLM endpoint (nothing for a given URL) and wait until it lists its model."""
        if not self.llm_port:
            return
        if self.llm == "vllm":
            command = vllm_serve_command(self.llm_port)
            env = {**os.environ, **VLLM_ENV}
        elif self.llm == "standin":
            command = [sys.executable, "-m", "voice_agent.engines.llm.standin_server", "--host", "127.0.0.1"]
            command += ["--port", str(self.llm_port), *self.llm_args]
            env = dict(os.environ)
        else:
            raise ValueError(f"--llm: a URL, vllm or standin; got {self.llm!r}")
        self.llm_process = self._spawn(command, f"llm-{self.llm_port}", env)
        deadline = time.monotonic() + self.ready_timeout
        while not _answers(self.llm_url + "/models"):
            if self.llm_process.poll() is not None:
                raise RuntimeError(f"the LLM server exited with {self.llm_process.returncode}; see {self.folder}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the LLM server did not answer within {self.ready_timeout:.0f} s")
            time.sleep(0.2)

    def stop_llm(self) -> None:
        if self.llm_process is not None:
            stop(self.llm_process, timeout=10)
            self.llm_process = None

    def start_gateway(self, index: int, wait: bool = True) -> None:
        port = self.gateway_ports[index]
        command = [sys.executable, "-m", "voice_agent", "serve", "--host", "127.0.0.1", "--port", str(port)]
        # HAProxy's X-Forwarded-For is believed: the per-address limits count callers, not the balancer.
        command += ["--llm", "openai", "--llm-url", self.llm_url, "--forwarded-allow-ips", "127.0.0.1"]
        command += self.serve_args
        self.gateways[index] = self._spawn(command, f"gateway-{index + 1}-{port}", dict(os.environ))
        if wait:
            self.wait_gateway(index)

    def wait_gateway(self, index: int) -> None:
        process = self.gateways[index]
        assert process is not None
        wait_ready(self.gateway_url(index), process, self.ready_timeout)

    def stop_gateway(self, index: int, timeout: float = 60.0) -> int:
        """SIGTERM, a graceful drain; returns the exit status."""
        process = self.gateways[index]
        assert process is not None
        stop(process, timeout)
        self.gateways[index] = None
        return process.returncode

    def start_haproxy(self) -> None:
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            raise RuntimeError("haproxy is not installed (apt-get install haproxy)")
        config = self.folder / "haproxy.cfg"
        config.write_text(haproxy_config(self.port, self.gateway_ports, self.stats_port))
        check = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused {config}: {check.stderr}")
        # -db: in the foreground, stopped with SIGTERM like the rest.
        self.haproxy = self._spawn([haproxy, "-db", "-f", str(config)], "haproxy", dict(os.environ))

    def backend_status(self) -> dict[str, str]:
        """Each gateway's state as HAProxy sees it: ``UP``, ``DOWN``, ``UP 1/2`` (rising) ..."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2) as response:
            text = response.read().decode().lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            row["svname"]: row["status"] for row in rows if row["pxname"] == "gateways" and row["svname"][:2] == "gw"
        }

    def wait_balancer(self, index: int, up: bool, timeout: float = 30.0) -> None:
        """Until HAProxy's health checks have taken gateway ``index`` in (``up``) or out of rotation."""
        name = f"gw{index + 1}"
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            try:
                status = self.backend_status().get(name, "")
            except OSError:
                status = "no stats yet"
            if (status == "UP") == up:
                return
            time.sleep(0.2)
        raise TimeoutError(f"HAProxy still says {name} is {status!r} after {timeout:.0f} s")

    def close(self) -> None:
        for index, process in enumerate(self.gateways):
            if process is not None:
                self.stop_gateway(index, timeout=30)
        if self.haproxy is not None:
            stop(self.haproxy, timeout=5)
            self.haproxy = None
        self.stop_llm()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def _spawn(self, command: list[str], name: str, env: dict[str, str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "a")
        self._logs.append(log)
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def __enter__(self) -> Topology:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# Small enough for a 2-core machine: 1 GiB of KV cache; and no hub access.
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def vllm_serve_command(port: int) -> list[str]:
    """`vllm serve` of the embedded SmolLM2 (converted by scripts/setup-vllm), small enough for a CPU.

    The vllm-cpu distribution's `vllm` command cannot find its own metadata; the module works."""
    from .engines.llm.model_cache import cache_dir
    from .engines.llm.vllm_engine import EMBEDDED_MODEL_NAME

    model = cache_dir() / EMBEDDED_MODEL_NAME
    if not VLLM_PYTHON.exists() or not (model / "config.json").exists():
        raise RuntimeError("--llm vllm needs .venv-vllm and the converted model: run scripts/setup-vllm")
    return [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        # Not bfloat16: on a Xeon with AMX, vLLM's CPU build writes nonsense in it even at temperature 0.
        "float32",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--enable-prefix-caching",
    ]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/topology",
        description="Start HAProxy, N voice-agent gateways and one shared LLM on loopback; Ctrl-C stops them.",
    )
    parser.add_argument("--gateways", type=int, default=2, help="gateways [default %(default)s]")
    parser.add_argument("--port", type=int, default=8080, help="the balancer's port [default %(default)s]")
    parser.add_argument(
        "--llm",
        default="standin",
        help="the shared LLM: an OpenAI-compatible base URL (http://host:8000/v1), vllm (`vllm serve` from "
        ".venv-vllm) or standin (the embedded llama.cpp model) [default %(default)s]",
    )
    parser.add_argument("--out", default="artifacts/topology", help="logs and haproxy.cfg [default %(default)s]")
    parser.add_argument("serve_args", nargs="*", help="after --: more `voice-agent serve` options for each gateway")
    args = parser.parse_args(argv)
    topology = Topology(
        Path(args.out), gateways=args.gateways, llm=args.llm, port=args.port, serve_args=args.serve_args
    )
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    try:
        topology.start()
        print(f"calls:   ws://127.0.0.1:{topology.port}/ws (browser: {topology.url}/)")
        print(f"stats:   http://127.0.0.1:{topology.stats_port}/stats")
        print(f"LLM:     {topology.llm_url}")
        for index in range(args.gateways):
            print(f"gateway {index + 1}: {topology.gateway_url(index)}")
        print(f"logs and haproxy.cfg: {args.out}; Ctrl-C stops everything (gateways drain first)", flush=True)
        while not stopping:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        topology.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
