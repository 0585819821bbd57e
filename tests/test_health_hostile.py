"""The prober and the canary against hostile real HTTP servers on loopback, and with proxy variables.

Each server is a real listening socket speaking raw HTTP from its own thread: a server that
trickles one byte a second, one that claims (or sends) a gigabyte, one that answers nested JSON or
a malformed schema. The probe must end by its deadline with a one-line reason, never raise, never
hold the body in memory, and never go through a proxy named in the environment.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ddtreed.health.canary.client import generate as canary_generate
from ddtreed.health.canary.client import service_load
from ddtreed.health.probes import Prober, request

GENERATE_OK = {"text": " Paris.", "output_ids": [1, 2], "meta_info": {"completion_tokens": 2,
                                                                       "spec_accept_length": 3.0}}


class RawServer:
    """Accepts connections and hands each socket to `behaviour(sock, request_bytes)`."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.sent = 0  # body bytes the behaviour managed to send
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += sock.recv(4096)
                self.behaviour(self, sock, data)
            except OSError:
                pass  # the client gave up on us: what a hostile server wants to test

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def raw_server():
    servers: list[RawServer] = []

    def start(behaviour) -> RawServer:
        servers.append(RawServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def trickle(server: RawServer, sock: socket.socket, _request: bytes) -> None:
    """One byte a second, for a minute: a valid answer that would take far longer than any budget."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n" + b"x" * 60
    for byte in answer:
        if server.stop.is_set():
            return
        sock.sendall(bytes([byte]))
        server.sent += 1
        time.sleep(1.0)


def gigabyte(claim: bool):
    def behaviour(server: RawServer, sock: socket.socket, _request: bytes) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\n" + (b"Content-Length: 1000000000\r\n" if claim else b"")
                     + b"Content-Type: application/json\r\n\r\n")
        block = b"[" * 65536
        for _ in range(1_000_000_000 // len(block)):
            sock.sendall(block)
            server.sent += len(block)
    return behaviour


def body(payload: bytes, chunked: bool = False):
    def behaviour(server: RawServer, sock: socket.socket, _request: bytes) -> None:
        if chunked:
            pieces = [payload[i:i + 7] for i in range(0, len(payload), 7)]
            framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + framed)
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    return behaviour


def test_a_trickling_server_cannot_hold_the_probe_past_its_deadline(raw_server):
    server = raw_server(trickle)
    prober = Prober(server.url)
    started = time.monotonic()
    result = prober.health(prober.deadline_in(2.0))
    waited = time.monotonic() - started
    assert not result.ok and "within the deadline" in result.detail, result.detail
    # Per-read timeouts would have waited for all 100 bytes (100 s); the deadline is for the whole.
    assert waited < 30 and server.sent < 30


def test_a_stop_request_ends_a_probe_long_before_its_deadline(raw_server):
    server = raw_server(trickle)
    stop = threading.Event()
    prober = Prober(server.url, interrupted=stop.is_set)
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    result = prober.generate("x", 4, prober.deadline_in(120.0))
    assert not result.ok and "interrupted" in result.detail, result.detail
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("claim", [True, False], ids=["content-length-1GB", "streamed-1GB"])
def test_a_gigabyte_answer_is_refused_at_the_cap_not_buffered(raw_server, claim):
    server = raw_server(gigabyte(claim))
    status, data, error = request(server.url, "GET", "/server_info", None, time.monotonic() + 60)
    assert status is None and data == b"" and "cap" in error, error
    if claim:
        assert "1000000000 bytes" in error
    assert server.sent < 100 * 1024 * 1024  # we hung up near the 8 MiB cap


def test_deeply_nested_json_is_a_clean_probe_failure(raw_server):
    nested = b'{"text": "x", "meta_info": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    server = raw_server(body(nested))
    prober = Prober(server.url)
    result = prober.generate("x", 4, prober.deadline_in(30))
    assert not result.ok and "nested deeper" in result.detail, result.detail
    assert prober.server_info(prober.deadline_in(30)) is None
    generation = canary_generate(server.url, "x", 4, time.monotonic() + 30)
    assert generation.error and "nested deeper" in generation.error


@pytest.mark.parametrize("answer, reason", [
    ({"text": "x", "meta_info": [1, 2]}, "meta_info is list"),
    ({"text": "x", "meta_info": "fast"}, "meta_info is str"),
    ([1, 2, 3], "not a JSON object but list"),
    ("just a string", "not a JSON object but str"),
], ids=["meta-list", "meta-string", "top-list", "top-string"])
def test_a_wrong_schema_is_a_failed_probe_naming_the_field(raw_server, answer, reason):
    server = raw_server(body(json.dumps(answer).encode()))
    prober = Prober(server.url)
    result = prober.generate("x", 4, prober.deadline_in(30))
    assert not result.ok and reason in result.detail, result.detail
    generation = canary_generate(server.url, "x", 4, time.monotonic() + 30)
    assert generation.error and reason in generation.error


def test_bools_are_not_token_counts(raw_server):
    answer = {"text": "x", "meta_info": {"completion_tokens": True, "spec_accept_length": True}}
    server = raw_server(body(json.dumps(answer).encode()))
    prober = Prober(server.url)
    result = prober.generate("x", 4, prober.deadline_in(30))
    assert not result.ok and result.accept_length is None and result.completion_tokens is None


def test_a_chunked_answer_is_read_whole(raw_server):
    server = raw_server(body(json.dumps(GENERATE_OK).encode(), chunked=True))
    prober = Prober(server.url)
    result = prober.generate("x", 2, prober.deadline_in(30))
    assert result.ok and result.accept_length == 3.0 and result.output_text == " Paris."


class _Service(BaseHTTPRequestHandler):
    """A well-behaved SGLang stand-in on the stdlib server (its framing, not ours)."""

    def do_GET(self):
        if self.path == "/metrics":
            self._send(b"sglang:num_running_reqs 2\nsglang:num_queue_reqs 1\n")
        else:
            self._send(b"{}" if self.path in ("/health_generate", "/health") else b"", 200 if
                       self.path in ("/health_generate", "/health") else 404)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(json.dumps(GENERATE_OK).encode())

    def _send(self, data: bytes, code: int = 200) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again: nothing listens there


@pytest.mark.parametrize("variable", ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"])
def test_proxy_variables_are_ignored_by_probes_and_the_canary(service, monkeypatch, variable):
    """GPU hosts set a proxy for model downloads; the service inherits it. A probe must not use it."""
    monkeypatch.setenv(variable, f"http://127.0.0.1:{_dead_port()}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    prober = Prober(service)
    health = prober.health(prober.deadline_in(30))
    assert health.ok, health.detail
    generated = prober.generate("The capital of France is", 2, prober.deadline_in(30))
    assert generated.ok and generated.accept_length == 3.0, generated.detail
    canary = canary_generate(service, "x", 2, time.monotonic() + 30)
    assert canary.error is None and canary.ids == [1, 2]
    assert service_load(service, time.monotonic() + 30) == 3


def test_a_refused_connection_is_one_line():
    status, _, error = request(f"http://127.0.0.1:{_dead_port()}", "GET", "/health", None,
                               time.monotonic() + 10)
    assert status is None and error.startswith("ConnectionRefusedError"), error


def test_sigterm_ends_the_real_daemon_while_a_probe_trickles(tmp_path):
    """`ddtreed run` probing a server that answers one byte a second: SIGTERM stops it at once,
    not after the probe budget (120 s here; the old per-read timeout never ended at all)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    port = _dead_port()
    marker = tmp_path / "probed"
    config = tmp_path / "ddtreed.toml"
    config.write_text(
        f'[service]\nargv = ["{sys.executable}", "{root / "tests" / "programs" / "trickle_service.py"}", '
        f'"{port}", "{marker}"]\nport = {port}\n'
        f'[paths]\nstate_dir = "{tmp_path / "state"}"\nlog_dir = "{tmp_path / "logs"}"\n'
        '[policy]\nstop_grace_s = 5\n[probe]\nhealth_timeout_s = 120\nstartup_timeout_s = 120\n'
        '[preflight]\nenabled = false\n[canary]\nenabled = false\n')
    daemon = subprocess.Popen([sys.executable, "-m", "ddtreed", "run", "--config", str(config)],
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), "the daemon never probed the service"
        time.sleep(1.0)  # well inside the trickle: the probe is reading
        daemon.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = daemon.wait(timeout=100)
        stopped_after = time.monotonic() - started
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
    assert code == 0, daemon.stderr.read()[-2000:]
    assert stopped_after < 60  # the stop grace (5 s) and the port wait, never the 120 s probe budget
