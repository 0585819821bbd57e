"""A healthy SGLang-shaped server that logs a complete traceback for each bad request and keeps
serving: what uvicorn/starlette print for a handled "Exception in ASGI application".

POST /boom logs the traceback and answers 500; /health, /health_generate and /generate answer 200.
SGLang's flags are accepted and ignored; --port is used.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handle_bad_request() -> None:
    raise ValueError("Invalid request: 'max_new_tokens' must be a positive integer, got -3")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._send(200 if self.path in ("/health", "/health_generate") else 404, b"")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/boom":
            try:
                handle_bad_request()
            except ValueError:
                text = traceback.format_exc()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            sys.stderr.write(f"[{stamp}] ERROR:    Exception in ASGI application\n{text}")
            sys.stderr.flush()
            self._send(500, b"Internal Server Error")
            return
        body = {"text": " Paris.", "meta_info": {"completion_tokens": 16, "spec_accept_length": 3.4}}
        self._send(200, json.dumps(body).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def main(argv: list[str]) -> None:
    port = int(argv[argv.index("--port") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] The server is fired up and ready to roll!",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
