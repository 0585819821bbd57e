"""A healthy SGLang-shaped service whose launcher keeps a pool of short-lived helper processes.

argv: --port PORT [--workers N] [--worker-life-s S] [--generate-s G] (other SGLang flags are ignored).

It prints SGLang's ready line, answers /health and /health_generate at once and /generate after G seconds (the same answer
to every prompt), and from
the ready line on keeps N helper processes alive in its session: each lives `--worker-life-s`,
is reaped and replaced (a tokenizer worker restarted by design, a JIT compiler run, an
`nvidia-smi` call), started staggered so one ends every S/N seconds. Nothing ever fails: no
crash text, the service answers every request.
"""

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--worker-life-s", type=float, default=4.0)
    parser.add_argument("--generate-s", type=float, default=0.0, help="each /generate takes this long")
    args, _unknown = parser.parse_known_args()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(200, b"" if self.path.startswith("/health") else b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(args.generate_s)
            body = {"text": " Paris is the capital of France.", "output_ids": [3681, 374, 279, 6864, 315, 9822, 13],
                    "meta_info": {"completion_tokens": 7}}
            self._send(200, json.dumps(body).encode())

        def _send(self, status: int, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up on the request: as a real server, say nothing
                pass

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stderr.write("The server is fired up and ready to roll!\n")
    sys.stderr.flush()
    helper = [sys.executable, "-c", f"import time; time.sleep({args.worker_life_s})"]
    pool = []
    for _ in range(args.workers):  # staggered: one ends every life/N seconds
        pool.append(subprocess.Popen(helper))
        time.sleep(args.worker_life_s / args.workers)
    while True:
        for index, worker in enumerate(pool):
            if worker.poll() is not None:  # reaped: a fresh one in its place
                pool[index] = subprocess.Popen(helper)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
