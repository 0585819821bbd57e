"""An SGLang-shaped service for the detection benchmark: serves, logs decode lines, crashes on cue.

Serves /health, /health_generate and /generate like tests/programs/fast_service.py (its HTTP
handler), logs `--lines-per-s` SGLang 0.5.16 decode lines of its TP ranks to stdout (one write
each, as each rank's logger does), and on SIGUSR2 writes the founding traceback of every rank to
stderr the way SGLang does (all of it but the last exception line, then that line and its blank
in a second write), then appends `crash <time.time() after the last write> <pid>` to `--events`.
Then it dies as SGLang's tree does after a rank's traceback (the scheduler's SIGQUIT to the launcher,
whose handler SIGKILLs the tree and itself): a live, healthy service's crash text is no crash for
the daemon (it waits for the exit or a failed health probe, ddtreed.loop.incident_path.observed),
so a service that printed the traceback and went on serving would time the wait, not detection.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "programs"))

from fast_service import Handler, founding_traceback, stamp  # noqa: E402

CUE: list[bool] = []  # set by the SIGUSR2 handler; a threading.Event set from a handler can
# deadlock against the main thread waiting on that same Event (its lock is held in wait())


def decode_line(rank: int, step: int) -> bytes:
    return (f"[{stamp()} TP{rank}] Decode batch, #running-req: 4, #token: {1000 + step % 5000}, "
            f"token usage: 0.02, accept len: 3.41, accept rate: 0.43, cuda graph: True, "
            f"gen throughput (token/s): 812.55, #queue-req: 0\n").encode()


def crash(tp: int, events: str | None) -> None:
    text = founding_traceback([f"TP{rank}" for rank in range(tp)]).encode()
    cut = text.rstrip(b"\n").rfind(b"\n", 0, len(text) - 2)  # the last exception line and its blank
    os.write(2, text[:cut + 1])
    os.write(2, text[cut + 1:])
    written = time.time()
    if events:
        with open(events, "a") as handle:
            handle.write(f"crash {written:.6f} {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)  # the launcher's kill of the tree


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tp-size", type=int, default=2)
    parser.add_argument("--lines-per-s", type=float, default=20.0)
    parser.add_argument("--events", default=None)
    args, _unknown = parser.parse_known_args(argv)
    signal.signal(signal.SIGUSR2, lambda *_: CUE.append(True))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.write(2, f"[{stamp()} TP0] Load weight begin. avail mem=139.13 GB\n".encode())
    os.write(2, f"[{stamp()}] The server is fired up and ready to roll!\n".encode())
    started, step = time.monotonic(), 0
    while True:
        if CUE:
            CUE.clear()
            crash(args.tp_size, args.events)
        if args.lines_per_s > 0:
            due = int((time.monotonic() - started) * args.lines_per_s)
            while step < due:
                os.write(1, decode_line(step % args.tp_size, step))
                step += 1
        time.sleep(0.002)  # a signal cuts it short


if __name__ == "__main__":
    main(sys.argv[1:])
