"""The ``voice-agent`` command."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import Settings, add_arguments
from .replay.command import add_arguments as replay_arguments
from .replay.command import main as replay_main

MAX_MESSAGE_BYTES = 1 << 20


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
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(Settings.from_sources(args))
    if args.command == "replay":
        return replay_main(args)
    return 2


def serve_command(settings: Settings) -> int:
    import uvicorn

    from .server import create_app

    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ws="websockets-sansio",
        ws_max_size=MAX_MESSAGE_BYTES,
        log_level=settings.log_level,
        lifespan="on",
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
