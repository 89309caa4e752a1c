"""A local stand-in for Twilio's REST API that records each request (method, path, form, Basic auth)."""

from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


class TwilioRestServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.received = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                scheme, _, credentials = (self.headers.get("authorization") or "").partition(" ")
                user, _, password = (
                    base64.b64decode(credentials).decode().partition(":") if credentials else ("", "", "")
                )
                server.requests.append(
                    {
                        "path": self.path,
                        "content_type": self.headers.get("content-type"),
                        "form": {k: v[0] for k, v in parse_qs(body).items()},
                        "auth": (scheme, user, password),
                    }
                )
                data = b'{"sid": "CA1", "status": "completed"}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                server.received.set()

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> TwilioRestServer:
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
