"""A client's own connection error against a dead server (a benchmark script, a rollout worker) is
named as such, not as SGLang's warm-up request: `requests`/`urllib3` frames alone no longer count
as the warm-up frame family; SGLang's own warm-up stack (http_server's `_wait_and_warmup`) still
does. The client rule is secondary (the server's own crash decides when it is in the text) and
hearsay (a live server's handled error that fetched a URL does not make it a crash)."""

from __future__ import annotations

import pytest

from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks.assembler import assemble_lines

RULES = load_rules([shipped("rules")])
SITE = "/usr/lib/python3.12/site-packages/"
REFUSED = ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries "
           "exceeded with url: /generate (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object "
           "at 0x7f1c2c3d5e50>: Failed to establish a new connection: [Errno 111] Connection refused'))")


def _traceback(frames: list[tuple[str, str]], last: str, before: tuple[str, ...] = ()) -> list[str]:
    lines = list(before) + ["Traceback (most recent call last):"]
    for number, (path, function) in enumerate(frames, start=10):
        lines += [f'  File "{path}", line {number}, in {function}', "    pass"]
    return lines + [last, ""]


def _diagnose(lines: list[str]):
    crashes = tuple(crash for group in assemble_lines(lines) for crash in group)
    assert crashes
    return RULES.diagnose(crashes)


CLIENT = [("/home/user/bench/send_requests.py", "<module>"), (f"{SITE}requests/api.py", "post"),
          (f"{SITE}requests/adapters.py", "send")]


@pytest.mark.parametrize("frames,last", [
    (CLIENT, REFUSED),
    ([("/srv/rollout/worker.py", "generate"), (f"{SITE}aiohttp/client.py", "_request"),
      (f"{SITE}aiohttp/connector.py", "_create_direct_connection")],
     "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 10.0.0.5:30000 ssl:default "
     "[Connect call failed ('10.0.0.5', 30000)]"),
    ([("/srv/eval/run.py", "main"), (f"{SITE}httpx/_client.py", "send"), (f"{SITE}httpx/_transports/default.py",
                                                                           "handle_request")],
     "httpx.ReadTimeout: timed out"),
])
def test_a_client_s_connection_error_is_named_a_client_s(frames, last):
    diagnosis = _diagnose(_traceback(frames, last))
    assert diagnosis.match.category == "other"
    assert diagnosis.match.rule_id == "client-request-to-server-failed", diagnosis.match.rule_id
    assert "client's request to the server failed" in diagnosis.match.diagnosis


def test_sglang_s_own_warm_up_request_is_still_the_warm_up():
    frames = [(f"{SITE}sglang/srt/entrypoints/http_server.py", "_wait_and_warmup"),
              (f"{SITE}sglang/srt/entrypoints/http_server.py", "_execute_server_warmup")] + CLIENT[1:]
    diagnosis = _diagnose(_traceback(frames, REFUSED))
    assert diagnosis.match.rule_id == "warm-up-request-failed", diagnosis.match.rule_id


def test_the_server_s_own_crash_outranks_the_client_s_echo():
    crash = _traceback([(f"{SITE}sglang/srt/managers/scheduler.py", "event_loop_overlap"),
                        (f"{SITE}sglang/srt/model_executor/model_runner.py", "forward")],
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                       before=("[2026-07-15 03:12:44 TP0] Scheduler hit an exception:",))
    diagnosis = _diagnose(crash + _traceback(CLIENT, REFUSED))
    assert diagnosis.match.category == "cuda-oom", diagnosis.match.rule_id


def test_a_live_server_fetching_an_image_is_not_decided_by_the_client_rule():
    # a multimodal request whose image URL does not answer: the server's handled error, not its death
    handled = _traceback([(f"{SITE}starlette/routing.py", "app"),
                          (f"{SITE}sglang/srt/utils/common.py", "load_image"),
                          (f"{SITE}requests/api.py", "get"), (f"{SITE}requests/adapters.py", "send")],
                         "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='images.invalid', port=443): "
                         "Max retries exceeded with url: /cat.png",
                         before=("[2026-07-15 03:12:44] ERROR:    Exception in ASGI application",))
    diagnosis = _diagnose(handled)
    assert not RULES.decides_live(diagnosis), diagnosis.match.rule_id
