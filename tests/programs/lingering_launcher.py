"""A launcher shaped like real SGLang 0.5.16 when a child dies: it says so, then lingers.

argv: STATE_DIR --port PORT [--hang-start N] [--linger-s S] (other SGLang flags are ignored).

Each start spawns two children in its session, a "scheduler_0" and a "detokenizer" (plain
sleepers), writes STATE_DIR/start-N.json ({"main", "scheduler_0", "detokenizer"} pids), prints
SGLang's ready line and serves /health, /health_generate and /generate. When a child dies it
prints 0.5.16's lines ("Subprocess detokenizer (pid=…) crashed with exit code -9. Triggering
SIGQUIT for cleanup...", the SIGQUIT line, the 5 s sleep line) and then lingers `--linger-s`
without answering anything: the main process stays alive, as the real launcher does while it
waits for CUDA coredumps.

On start `--hang-start`, every /generate after the first one is never answered (the first is
the relaunch's verification; the next ones are the loop's verification of the running service):
the program appends "hanging <time.time()>" to STATE_DIR/events when one arrives.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HUNG = threading.Event()  # a child died: nothing is answered any more
GENERATES = [0]


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def say(text: str) -> None:
    sys.stderr.write(f"[{stamp()}] {text}\n")
    sys.stderr.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state_dir")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--hang-start", type=int, default=0)
    parser.add_argument("--linger-s", type=float, default=120.0)
    args, _unknown = parser.parse_known_args()
    starts = [name for name in os.listdir(args.state_dir) if name.startswith("start-")]
    start = len(starts) + 1
    children = {name: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
                for name in ("scheduler_0", "detokenizer")}
    pids = {"main": os.getpid(), **{name: child.pid for name, child in children.items()}}
    path = os.path.join(args.state_dir, f"start-{start}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(pids, handle)
    os.replace(path + ".tmp", path)

    def on_sigterm(signum, frame):
        for child in children.values():
            child.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if HUNG.is_set():
                threading.Event().wait()
            self._send(200, b"" if self.path.startswith("/health") else b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            GENERATES[0] += 1
            if HUNG.is_set() or (start == args.hang_start and GENERATES[0] > 1):
                with open(os.path.join(args.state_dir, "events"), "a") as handle:
                    handle.write(f"hanging {time.time():.6f}\n")
                threading.Event().wait()
            body = {"text": " Paris.", "meta_info": {"completion_tokens": 4}}
            self._send(200, json.dumps(body).encode())

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say("The server is fired up and ready to roll!")
    while True:
        for name, child in children.items():
            code = child.poll()
            if code is not None:
                HUNG.set()
                say(f"Subprocess {name} (pid={child.pid}) crashed with exit code {code}. "
                    "Triggering SIGQUIT for cleanup...")
                say("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
                say("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
                time.sleep(args.linger_s)
                on_sigterm(None, None)
        time.sleep(0.02)


if __name__ == "__main__":
    main()
