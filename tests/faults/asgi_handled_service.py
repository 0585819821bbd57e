"""A hostile-but-healthy service: tests/programs/fast_service.py serving, plus a handled web
framework traceback ("Exception in ASGI application", one bad request) on stderr every
`DDTREED_TEST_TRACEBACK_EVERY_S` seconds, as uvicorn prints it. Nothing is wrong with the server."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "programs"))

import fast_service

HANDLED = """ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi
    result = await app(  # type: ignore[func-returns-value]
  File "/opt/venv/lib/python3.12/site-packages/starlette/applications.py", line 123, in __call__
    await self.middleware_stack(scope, receive, send)
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/entrypoints/http_server.py", line 512, in generate_request
    obj = GenerateReqInput(**payload)
ValueError: invalid literal for int() with base 10: 'abc'
"""


def _bad_requests(every_s: float, marks: str | None) -> None:
    while True:
        time.sleep(every_s)
        sys.stderr.write(HANDLED)
        sys.stderr.flush()
        if marks:
            with open(marks, "a") as handle:
                handle.write(f"handled {time.time():.6f}\n")


if __name__ == "__main__":
    every = float(os.environ.get("DDTREED_TEST_TRACEBACK_EVERY_S", "1.0"))
    threading.Thread(target=_bad_requests, args=(every, os.environ.get("DDTREED_TEST_MARKS")),
                     daemon=True).start()
    fast_service.main(sys.argv[1:])
