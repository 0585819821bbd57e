"""An SGLang-shaped service tree for the kill-window tests (tests/faults/test_kill_windows.py).

The launcher serves the HTTP endpoints of tests/programs/fast_service.py and starts `--ranks`
scheduler children the way SGLang does: each is a fresh interpreter in the launcher's session that
renames itself with the real `setproctitle` package (`sglang::scheduler_TP0`, what SGLang's
schedulers call). `--fork-every S`: once ready, the launcher keeps forking short-lived helpers
every S seconds (at most 32 alive, the oldest replaced), a launcher still starting workers when
the next daemon's recovery sweeps it.

Events (`--events FILE`, one line each): `start PID`, `titled RANK PID` (a child after its
rename), `ready PID`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "programs"))
from fast_service import Handler, stamp  # noqa: E402  (the same endpoints as the fast service)


def event(path: str, *what: object) -> None:
    with open(path, "a") as handle:
        handle.write(" ".join(map(str, what)) + "\n")


def child(rank: int, events: str) -> None:
    import setproctitle

    setproctitle.setproctitle(f"sglang::scheduler_TP{rank}")
    event(events, "titled", rank, os.getpid())
    while True:
        signal.pause()


def titled(events: str) -> set[int]:
    try:
        lines = Path(events).read_text().splitlines()
    except FileNotFoundError:
        return set()
    return {int(line.split()[2]) for line in lines if line.startswith("titled ")}


def fork_forever(every: float) -> None:
    alive: deque[int] = deque()
    while True:
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        alive.append(pid)
        if len(alive) > 32:
            oldest = alive.popleft()
            os.kill(oldest, signal.SIGKILL)
            os.waitpid(oldest, 0)
        time.sleep(every)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--fork-every", type=float, default=0.0)
    parser.add_argument("--child", type=int, default=None)
    args, _unknown = parser.parse_known_args()
    if args.child is not None:
        child(args.child, args.events)
        return
    event(args.events, "start", os.getpid())
    children = [subprocess.Popen([sys.executable, __file__, "--child", str(rank), "--events", args.events,
                                  "--port", str(args.port)]) for rank in range(args.ranks)]
    pids = {process.pid for process in children}
    while not pids <= titled(args.events):  # every rank renamed itself before the server is ready
        time.sleep(0.01)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"[{stamp()}] The server is fired up and ready to roll!", file=sys.stderr, flush=True)
    event(args.events, "ready", os.getpid())
    if args.fork_every > 0:
        fork_forever(args.fork_every)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
