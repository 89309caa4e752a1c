"""A stand-in for `vllm serve`: the embedded llama.cpp model behind an OpenAI-compatible endpoint.

For trying and testing gateways (``--llm openai``) where vLLM is not built:
it starts in seconds on any CPU, so a test can stop and restart it. It serves
what the OpenAI-compatible backend asks for: ``GET /v1/models`` and streamed
``POST /v1/chat/completions`` (text only; the sampling settings are this
process's own ``--llm-*`` options, not the request's). A client that goes
away aborts its generation, as with vLLM. Not for production: one process,
``--llm-instances`` answers at a time.

    python -m voice_agent.engines.llm.standin_server --port 8100 [any voice-agent serve --llm-* option]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...config import Settings, add_arguments
from ..loader import create_llm
from .base import LLMBackend

log = logging.getLogger(__name__)

MODEL_NAME = "voice-agent-standin"


def create_app(llm: LLMBackend) -> Starlette:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
            messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": {"message": "expected a JSON body with messages"}}, status_code=400)
        if not body.get("stream"):
            return JSONResponse({"error": {"message": "only stream: true is served"}}, status_code=400)
        return StreamingResponse(events(messages), media_type="text/event-stream")

    async def events(messages: list) -> AsyncIterator[str]:
        created = int(time.time())

        def chunk(delta: dict, finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            payload = {"object": "chat.completion.chunk", "created": created, "model": MODEL_NAME, "choices": [choice]}
            return f"data: {json.dumps(payload)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        stream = llm.stream_chat(messages)
        async with contextlib.aclosing(stream):  # a client gone cancels this generator, which aborts the answer
            async for delta in stream:
                yield chunk({"content": delta})
        yield chunk({}, "stop")
        yield "data: [DONE]\n\n"

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await llm.warm_up()
        yield
        await llm.close()

    routes = [Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)  # --host, --port and the --llm-* options of voice-agent serve
    args = parser.parse_args(argv)
    settings = Settings.from_sources(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(create_llm(settings))
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
