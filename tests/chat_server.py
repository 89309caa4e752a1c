"""A tiny OpenAI-compatible chat completions server for tests: scripted answers, streamed, with tool calls.

It speaks what ``vllm serve --enable-auto-tool-choice`` sends: server-sent
events whose deltas carry ``content`` text, or ``tool_calls`` with the id and
name in the first piece and the JSON arguments split over several pieces,
then ``finish_reason: tool_calls``. ``respond(request_body)`` decides each
answer: a list of text pieces and :class:`Call` items. It runs in a thread,
so a server process under test can reach it from a synchronous test too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]
    id: str = ""


Answer = list[str | Call]


class ChatServer:
    def __init__(self, respond: Callable[[dict[str, Any]], Answer], piece_delay_s: float = 0.0):
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.piece_delay_s = piece_delay_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json({"object": "list", "data": [{"id": "scripted"}]})
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                server.requests.append(body)
                answer = server.respond(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for event in stream_events(answer, len(server.requests)):
                        self.wfile.write(f"data: {event}\n\n".encode())
                        self.wfile.flush()
                        if server.piece_delay_s:
                            threading.Event().wait(server.piece_delay_s)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client closed the stream: a barge-in
                self.close_connection = True

            def _json(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


def stream_events(answer: Answer, request_number: int) -> list[str]:
    """The events of one streamed answer, as JSON texts."""

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps(
            {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    events = [event({"role": "assistant", "content": ""})]
    calls = [item for item in answer if isinstance(item, Call)]
    for item in answer:
        if isinstance(item, str):
            events.append(event({"content": item}))
    for index, call in enumerate(calls):
        arguments = json.dumps(call.arguments)
        call_id = call.id or f"call_{request_number}_{index}"
        events.append(
            event(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        # The arguments arrive in pieces, as a server streams them token by token.
        for start in range(0, len(arguments), 7):
            events.append(
                event({"tool_calls": [{"index": index, "function": {"arguments": arguments[start : start + 7]}}]})
            )
    events.append(event({}, "tool_calls" if calls else "stop"))
    return events


def last_tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of the tool messages at the end of a request (the results the model is to talk about)."""
    results: list[str] = []
    for message in reversed(body["messages"]):
        if message["role"] != "tool":
            break
        results.insert(0, message["content"])
    return results


def last_user_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
