"""The ``voice-agent`` command."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import faulthandler
import io
import os
import socket
import sys

from .bench.command import add_arguments as bench_arguments
from .bench.command import main as bench_main
from .config import Settings, add_arguments
from .replay.command import add_arguments as replay_arguments
from .replay.command import main as replay_main

MAX_MESSAGE_BYTES = 1 << 20
# Each connection's kernel send buffer (Linux doubles it), fixed so that a send to a client that reads nothing waits
# after about 164 KB; autotuned, a loopback connection absorbs 2.8 MB (90 s of 16 kHz audio). Real-time audio needs
# far less: 48 kHz PCM16 is 96 KB/s. Set on the listening socket, which accepted ones inherit.
SEND_BUFFER_BYTES = 64 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voice-agent", description="A real-time voice agent.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the voice agent server",
        description="Run the voice agent: WebSocket /ws, browser client at /, probes /healthz and /readyz. "
        "Every option can also be set with the environment variable shown; flags win over the environment.",
    )
    add_arguments(serve)
    replay = commands.add_parser(
        "replay",
        help="measure latency from the client side by replaying recorded turns",
        description="Replay recorded audio turns against a running agent at real-time pace and measure, "
        "at the client, voice-to-voice latency, transcript latency, barge-in stop time and WER. "
        "See docs/replay.md.",
    )
    replay_arguments(replay)
    bench = commands.add_parser(
        "bench",
        help="run a benchmark or eval (latency, load, endpointing, barge-in) against a local server",
    )
    bench_arguments(bench)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(Settings.from_sources(args))
    if args.command == "replay":
        return replay_main(args)
    if args.command == "bench":
        return bench_main(args)
    return 2


def cap_malloc_arenas(arenas: int = 2) -> None:
    """Limit glibc to a few malloc arenas, unless MALLOC_ARENA_MAX says otherwise.

    glibc gives threads their own arenas (up to 8 per core) and rarely returns
    their free memory; with Whisper, llama.cpp, Piper and the event loop
    allocating from a dozen worker threads, the server's RSS grows in steps
    over a soak (docs/results/load.md). Must run before those threads exist;
    a no-op off glibc.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return  # glibc read it at start-up
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_ARENA_MAX = -8  # from glibc's malloc.h
    libc.mallopt(M_ARENA_MAX, arenas)


def serve_command(settings: Settings) -> int:
    from .server.preflight import problems

    if found := problems(settings):
        print("voice-agent serve: the settings cannot work:", *(f"  {p}" for p in found), sep="\n", file=sys.stderr)
        return 2
    # Whisper, llama.cpp and Piper share a few cores. OpenMP's default spin-wait
    # burns a core while one engine waits for the next parallel region, starving
    # the others (measured in docs/architecture.md, "Concurrency"). Read when
    # the libraries load, so set before any engine is imported; an explicit setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cap_malloc_arenas()
    # A crash inside a native engine (Whisper, llama.cpp, Piper, onnxruntime) kills the process with no
    # Python traceback; this prints every thread's stack to stderr first, so the log says where it was.
    # A stderr that is no file (an embedding host's, a test's capture) has nowhere to print it.
    with contextlib.suppress(io.UnsupportedOperation, ValueError, AttributeError):
        faulthandler.enable()
    import uvicorn

    from . import log
    from .server.app import create_app
    from .server.shutdown import GracefulServer

    log.configure(
        settings.log_level,
        settings.log_format,
        secrets=(settings.auth_token, settings.telephony_token, settings.twilio_auth_token),
        transcripts=settings.log_transcripts,
    )
    try:
        app = create_app(settings)
    except ValueError as exc:  # a bad --agent spec: say which, without a traceback
        print(f"voice-agent serve: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ws="websockets-sansio",
        ws_max_size=MAX_MESSAGE_BYTES,
        # A 1 KiB compressed frame can inflate to a megabyte of work; audio barely compresses anyway.
        ws_per_message_deflate=False,
        log_level=log.library_level(settings.log_level),
        log_config=None,  # uvicorn's lines go through log.configure's handler: session ids, no secrets
        lifespan="on",
        # Sessions are drained before uvicorn's shutdown starts; this bounds what is left after that.
        timeout_graceful_shutdown=5,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise: then any local client could
        # name its own address, and pass the per-address limits. Only the proxies the operator lists.
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=list(settings.forwarded_allow_ips),
    )
    runtime = app.state.runtime
    server = GracefulServer(config, runtime.sessions, settings.shutdown_grace_s)
    runtime.on_load_failure = server.stop_now
    listener = config.bind_socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    server.run(sockets=[listener])
    return 1 if runtime.load_failed else 0


if __name__ == "__main__":
    sys.exit(main())
