"""The demo imitation held to real SGLang 0.5.16: every line kind and HTTP answer the demo produces
has the format real SGLang produced on the H200 (tests/fixtures/sglang-0.5.16). Each format is
first checked against the real lines, then against the demo's."""

from __future__ import annotations

import gzip
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from ddtreed.config import load
from ddtreed.demo import prepare
from ddtreed.service.host import LocalHost
from ddtreed.service.launch import Supervisor
from ddtreed.records import ExitStatus

from supervision_helpers import wait_for

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"
N, F = r"\d+", r"\d+\.\d\d"
# line kind -> (substring that identifies it, the real format of its message)
FORMATS = {
    "load-begin": ("Load weight begin", rf"Load weight begin\. avail mem={F} GB"),
    "load-end": ("Load weight end", rf"Load weight end\. elapsed={F} s, type=\w+, avail mem={F} GB, "
                                    rf"mem usage={F} GB\."),
    "kv-cache": ("KV Cache is allocated", rf"KV Cache is allocated\. dtype: torch\.\w+, #tokens: {N}, "
                                          rf"K size: {F} GB, V size: {F} GB"),
    "memory-pool": ("Memory pool end", rf"Memory pool end\. avail mem={F} GB"),
    "verify-begin": ("verify CUDA graph begin", rf"Capture target verify CUDA graph begin\. backend=\w+, "
                                                rf"num_tokens_per_req={N}, bs=\[[\d, ]+\], avail mem={F} GB"),
    "verify-end": ("verify CUDA graph end", rf"Capture target verify CUDA graph end\. elapsed={F} s, "
                                            rf"mem usage={F} GB, avail mem={F} GB\."),
    "max-total": ("max_total_num_tokens=", rf"max_total_num_tokens={N}, chunked_prefill_size={N}, "
                                           rf"max_prefill_tokens={N}, max_running_requests={N}, "
                                           rf"context_len={N}, available_gpu_mem={F} GB"),
    "ready": ("ready to roll", r"The server is fired up and ready to roll!"),
    "decode": ("Decode batch", rf"Decode batch, #running-req: {N}, #token: {N}, token usage: {F}, "
                               rf"(?:accept len: {F}, accept rate: {F}, )?cuda graph: (True|False), "
                               rf"gen throughput \(token/s\): {F}, #queue-req: {N}"),
    "prefill": ("Prefill batch", rf"Prefill batch, #new-seq: {N}, #new-token: {N}, #cached-token: {N}, "
                                 rf"token usage: {F}, #running-req: {N}, #queue-req: {N}, "
                                 rf"#pending-token: {N}, cuda graph: (True|False), input throughput "
                                 rf"\(token/s\): {F}"),
    "access": (" HTTP/1.1\" ", rf'INFO:     [\d.]+:{N} - "(GET|POST) \S+ HTTP/1\.1" {N} [A-Z][A-Za-z ]+'),
    "uvicorn": ("Uvicorn running", rf"INFO:     Uvicorn running on http://[\d.]+:{N} \(Press CTRL\+C to quit\)"),
    "sigterm": ("SIGTERM received", r"SIGTERM received\. signum=None frame=None\. Draining requests and "
                                    r"shutting down\.\.\."),
    "graceful": ("Gracefully exiting", rf"Gracefully exiting\.\.\. Remaining number of requests {N}\. "
                                       r"Remaining requests remaining_rids=\[\]\."),
    "kill-tree": ("kill_process_tree called", rf"kill_process_tree called: parent_pid={N}, "
                                              rf"include_parent=(True|False), pid={N}"),
    "child-death": ("crashed with exit code", rf"Subprocess scheduler_{N} \(pid={N}\) crashed with exit "
                                              rf"code -?{N}\. Triggering SIGQUIT for cleanup\.\.\."),
    "sigquit": ("SIGQUIT received", r"SIGQUIT received\. signum=None, frame=None\. It usually means one "
                                    r"child failed\."),
    "bind-error": ("error while attempting to bind", rf"ERROR:    \[Errno 98\] error while attempting "
                                                     rf"to bind on address \('[\d.]+', {N}\): address "
                                                     r"already in use"),
}
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]{2}\d+)*\] ")


def kinds(lines) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in lines:
        prefix = PREFIX.match(line)
        if prefix is None:
            continue
        message = line[prefix.end():]
        for kind, (needle, _) in FORMATS.items():
            if needle in message:
                found.setdefault(kind, []).append(message)
    return found


def assert_formats(lines, need: set[str], where: str) -> None:
    found = kinds(lines)
    assert need <= set(found), f"{where}: no {sorted(need - set(found))} lines"
    for kind, messages in found.items():
        pattern = re.compile(FORMATS[kind][1] + "$")
        bad = [m for m in messages if not pattern.match(m)]
        assert not bad, f"{where}: {kind} lines differ from real 0.5.16: {bad[:2]}"


REAL = {"ngram.log": {"load-begin", "load-end", "kv-cache", "memory-pool", "verify-begin",
                      "verify-end", "max-total", "ready", "decode", "prefill", "access", "uvicorn",
                      "sigterm", "graceful", "kill-tree"},
        "ck_scheduler.log": {"child-death", "sigquit", "kill-tree"},
        "portinuse.log": {"bind-error", "ready", "kill-tree"}}


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_formats_are_real_sglang_0516s(name):
    assert_formats((FIXTURES / name).read_text().splitlines(), REAL[name], name)


def real_meta_info() -> dict:
    entries = json.loads(gzip.decompress((FIXTURES / "ngram_http.json.gz").read_bytes()))
    return next(e["body"]["meta_info"] for e in entries
                if e["path"] == "/generate" and isinstance(e.get("body"), dict))


class Demo:
    def __init__(self, demo_dir: Path, port: int | None = None):
        self.config = load(prepare(demo_dir, algorithm="DFLASH", tp=1, device="cpu", load_seconds=0.2,
                                   port=port))
        self.port = self.config.service.port
        self.supervisor = Supervisor(LocalHost(), self.config, list(self.config.service.argv),
                                     self.config.service.env)
        self.supervisor.start()
        self.log = Path(self.supervisor.log_paths[1])

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def wait(self, text: str, timeout: float = 60) -> None:
        wait_for(lambda: any(text in line for line in self.lines()) or self.supervisor.poll(),
                 timeout, what=text)

    def call(self, method: str, path: str, payload=None):
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()


def test_the_demo_prints_and_answers_like_real_sglang_0516(tmp_path):
    demo = Demo(tmp_path / "demo")
    try:
        demo.wait("ready to roll")
        status, headers, body = demo.call("GET", "/health_generate")
        assert (status, body, headers.get("Content-Length")) == (200, b"", "0")  # real: empty body
        status, _, body = demo.call("POST", "/generate", {"text": "The capital of France is",
                                                          "sampling_params": {"max_new_tokens": 24,
                                                                              "temperature": 0}})
        answer, real = json.loads(body), real_meta_info()
        assert status == 200 and set(answer) >= {"text", "output_ids", "meta_info"}
        meta = answer["meta_info"]
        assert set(meta) <= set(real), f"keys real 0.5.16 has not: {set(meta) - set(real)}"
        for key, value in meta.items():
            assert type(value) is type(real[key]) or {type(value), type(real[key])} == {int, float}, key
        for payload, message in ((
                {"text": "x", "sampling_params": {"temperature": -3}},
                "temperature must be a non-negative finite number, got -3."), (
                {"text": "word " * 5000, "sampling_params": {"max_new_tokens": 4}},
                "is longer than the model's context length (4096 tokens).")):
            status, _, body = demo.call("POST", "/generate", payload)
            assert status == 400 and message in json.loads(body)["error"]["message"]
        demo.wait("Decode batch")
    finally:
        status = demo.supervisor.stop("test")
    assert status == ExitStatus(code=None, signal=9)  # real: rc 137 after the drain
    assert_formats(demo.lines(), REAL["ngram.log"], "demo")


def test_the_demo_child_death_and_false_ready_read_like_real_sglang(tmp_path):
    first = Demo(tmp_path / "first")
    try:
        first.wait("ready to roll")
        second = Demo(tmp_path / "second", port=first.port)  # the port is taken
        wait_for(lambda: second.supervisor.poll() is not None, 60, what="the second demo to give up")
        assert_formats(second.lines(), REAL["portinuse.log"], "demo on a taken port")
        scheduler = next(child for child in psutil.Process(first.supervisor.pid).children()
                         if child.name().startswith("sglang::sched"))
        scheduler.kill()
        try:
            first.call("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}})
        except (urllib.error.URLError, ConnectionError, OSError):
            pass  # the tree dies under the request, as the real one does
        wait_for(lambda: first.supervisor.poll() is not None, 30, what="the first demo to die")
        assert_formats(first.lines(), REAL["ck_scheduler.log"], "demo after a killed scheduler")
    finally:
        first.supervisor.stop("test")
