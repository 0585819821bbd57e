"""`python -m ddtreed.demo.server`: the demo's launcher process, shaped like sglang.launch_server.

It spawns one scheduler process per TP rank (`ddtreed.demo.workload`), waits for them, serves
SGLang's HTTP endpoints, and when a rank fails it dies the way SGLang does: the rank logs its
traceback and sends SIGQUIT, and this process logs that and SIGKILLs the whole tree.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import args as demo_args
from . import language_model as model

_RANK_REPORT_WAIT_S = 1.0
_DRAIN_MAX_S = 30.0
CONTEXT_LEN = 4096
_REQUEST_IDS = itertools.count(1)
VERSION = "0.0.0+ddtreed.demo"


class RankPool:
    """The scheduler processes; one batch (one request) at a time, like `--max-running-requests 1`."""

    def __init__(self, server_args, logger):
        self.args, self.log = server_args, logger
        self.serving = False
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "ddtreed.demo.workload", str(rank), demo_args.to_json(server_args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            for rank in range(server_args.tp_size)]
        self.accept_history: list[float] = []
        self.stopping = False  # the tree is going down (drain, kill): child exits are expected
        self._death_lock = threading.Lock()

    def wait_ready(self) -> None:
        for rank, proc in enumerate(self.procs):
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                self.log.error("Rank %d scheduler died during initialization (exit code: %s)", rank, code)
                self.kill_children()
                raise RuntimeError(f"Initialization failed. rank {rank} exit code {code}")
        threading.Thread(target=self._watch_children, daemon=True).start()

    def _watch_children(self) -> None:
        """Real SGLang's launcher notices a dead scheduler at once, request or not."""
        while not self.stopping:
            for rank, proc in enumerate(self.procs):
                if proc.poll() is not None and not self.stopping:
                    self._died(rank, proc)
            time.sleep(0.05)

    def _died(self, rank: int, proc: subprocess.Popen) -> None:
        with self._death_lock:
            if self.stopping:
                return
            self.stopping = True
            self.log.error("Subprocess scheduler_%d (pid=%d) crashed with exit code %s. Triggering "
                           "SIGQUIT for cleanup...", rank, proc.pid, proc.wait())
            self.log.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            kill_tree(self)

    def generate(self, input_ids: list[int], max_new_tokens: int) -> dict:
        """Every rank runs the step (as TP ranks do); rank 0's answer is the response."""
        request = json.dumps({"id": next(self._ids), "input_ids": input_ids,
                              "max_new_tokens": max_new_tokens}) + "\n"
        with self._lock:
            for rank, proc in enumerate(self.procs):
                try:
                    proc.stdin.write(request)
                    proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    self._died(rank, proc)
            answers = [self._read(rank, proc) for rank, proc in enumerate(self.procs)]
        if answers[0]["verify_ct"]:
            self.accept_history = (self.accept_history + [answers[0]["accept_length"]])[-32:]
        return answers[0]

    def _read(self, rank: int, proc: subprocess.Popen) -> dict:
        line = proc.stdout.readline()
        if line:
            return json.loads(line)
        # A rank that vanished without a traceback (SIGKILL, NCCL abort): SGLang's wording.
        self._died(rank, proc)
        raise RuntimeError("unreachable: the tree was killed")

    def kill_children(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()


def kill_tree(pool: RankPool | None) -> None:
    """SGLang's kill_process_tree(include_parent=True): children first, then ourselves."""
    if pool is not None:
        pool.stopping = True
        pool.log.info("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d",
                      os.getpid(), os.getpid())
        pool.kill_children()
    os.kill(os.getpid(), signal.SIGKILL)


class Handler(BaseHTTPRequestHandler):
    server: "DemoHTTPServer"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        state = self.server.state
        if self.path in ("/health", "/health_generate"):
            if not state.ready or state.draining:
                return self._empty(503)
            if self.path == "/health_generate":
                state.pool.generate(model.encode("health"), 1)  # SGLang: a 1-token generation
            return self._empty(200)  # real 0.5.16: 200 with an empty body
        if self.path in ("/server_info", "/get_server_info"):
            return self._json(200, state.server_info())
        self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.path != "/generate":
            return self._json(404, {"detail": "Not Found"})
        started = time.monotonic()
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            text = body["text"]
            sampling = body.get("sampling_params") or {}
            max_new_tokens = int(sampling.get("max_new_tokens", 16))
            temperature = float(sampling.get("temperature", 1.0))
        except (ValueError, KeyError, TypeError) as error:
            return self._error(f"bad request: {error}")
        # real 0.5.16's 400 answers (tests/fixtures/sglang-0.5.16/basic_http.txt)
        if not temperature >= 0:
            return self._error(f"temperature must be a non-negative finite number, got {temperature:g}.")
        prompt = model.encode(text)
        if len(prompt) > CONTEXT_LEN:
            return self._error(f"The input ({len(prompt)} tokens) is longer than the model's context "
                               f"length ({CONTEXT_LEN} tokens).")
        state = self.server.state
        state.inflight += 1
        try:
            answer = state.pool.generate(prompt, max(1, max_new_tokens))
        finally:
            state.inflight -= 1
        ids = answer["output_ids"]
        steps = answer["verify_ct"]
        width = demo_args.tokens_per_request(state.args)
        self._json(200, {"text": " " + model.decode(ids), "output_ids": ids, "meta_info": {
            "id": f"{next(_REQUEST_IDS):032x}",
            "finish_reason": {"type": "length", "length": max_new_tokens},
            "prompt_tokens": len(prompt), "weight_version": "default", "completion_tokens": len(ids),
            "cached_tokens": 0, "e2e_latency": round(time.monotonic() - started, 4),
            "spec_accept_rate": round((answer["accept_length"] - 1) / max(width - 1, 1), 4),
            "spec_accept_length": round(answer["accept_length"], 4), "spec_verify_ct": steps}})

    def _error(self, message: str) -> None:
        self._json(400, {"error": {"message": message}})

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # uvicorn's access-log shape
        code = args[1] if len(args) > 1 else ""
        phrase = HTTPStatus(int(code)).phrase if str(code).isdigit() else ""
        self.server.state.log.info('INFO:     %s:%d - "%s" %s %s', self.client_address[0],
                                   self.client_address[1], self.requestline, code, phrase)


class ServiceState:
    def __init__(self, server_args, pool: RankPool, logger):
        self.args, self.pool, self.log = server_args, pool, logger
        self.ready = False
        self.draining = False
        self.inflight = 0

    def server_info(self) -> dict:
        history = self.pool.accept_history
        average = sum(history) / len(history) if history else None
        return {**vars(self.args), "version": VERSION,
                "internal_states": [{"avg_spec_accept_length": average}]}


class DemoHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, state: ServiceState):
        super().__init__(address, Handler)
        self.state = state


def main(argv: list[str] | None = None) -> None:
    server_args = demo_args.parse(sys.argv[1:] if argv is None else argv)
    logger = demo_args.configure_logging()
    logger.info("server_args=%s", demo_args.describe(server_args))
    pool: RankPool | None = None
    states: list[ServiceState] = []
    quits = [0]

    def on_sigquit(signum, frame):
        quits[0] += 1
        if quits[0] > 1:
            return  # another rank reporting while the first report waits below
        # On a real node the tree takes long enough to die that every failed rank's traceback
        # reaches the log; wait (briefly) for the other ranks' reports to keep that true here.
        deadline = time.monotonic() + _RANK_REPORT_WAIT_S
        while quits[0] < server_args.tp_size and time.monotonic() < deadline:
            time.sleep(0.02)
        if pool is not None and pool.serving:
            logger.error(f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed.")
        else:
            logger.error("Received sigquit from a child process. It usually means the child failed.")
        kill_tree(pool)

    def on_sigterm(signum, frame):
        # real 0.5.16: drain the requests in flight, then SIGKILL the whole tree (rc 137)
        logger.info("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        threading.Thread(target=_drain_and_exit, args=(states, pool, logger), daemon=True).start()

    signal.signal(signal.SIGQUIT, on_sigquit)
    signal.signal(signal.SIGTERM, on_sigterm)
    pool = RankPool(server_args, logger)
    pool.wait_ready()
    state = ServiceState(server_args, pool, logger)
    states.append(state)
    logger.info("INFO:     Started server process [%d]", os.getpid())
    logger.info("INFO:     Waiting for application startup.")
    logger.info("INFO:     Application startup complete.")
    try:
        httpd = DemoHTTPServer((server_args.host, server_args.port), state)
    except OSError as error:
        _bind_failed(state, error)
        return
    logger.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)",
                server_args.host, server_args.port)
    threading.Thread(target=_warm_up, args=(state,), daemon=True).start()
    httpd.serve_forever(poll_interval=0.2)


def _bind_failed(state: ServiceState, error: OSError) -> None:
    """Real 0.5.16 when the port is taken: log uvicorn's error, then the warm-up request reaches
    whatever holds the port, and a *false* ready line follows (portinuse.log)."""
    args, log = state.args, state.log
    log.error("ERROR:    [Errno %d] error while attempting to bind on address ('%s', %d): %s",
              error.errno or 0, args.host, args.port, (error.strerror or str(error)).lower())
    log.info("INFO:     Waiting for application shutdown.")
    import urllib.request

    try:
        urllib.request.urlopen(f"http://{args.host}:{args.port}/health", timeout=5).read()
        log.info("The server is fired up and ready to roll!")
    except OSError:
        pass
    log.info("INFO:     Application shutdown complete.")
    log.info("kill_process_tree called: parent_pid=%d, include_parent=False, pid=%d",
             os.getpid(), os.getpid())
    state.pool.kill_children()


def _drain_and_exit(states: list[ServiceState], pool: RankPool | None, logger) -> None:
    deadline = time.monotonic() + _DRAIN_MAX_S
    for state in states:
        state.draining = True
        while state.inflight and time.monotonic() < deadline:
            time.sleep(0.02)
    logger.info("Gracefully exiting... Remaining number of requests 0. Remaining requests "
                "remaining_rids=[].")
    kill_tree(pool)


def _warm_up(state: ServiceState) -> None:
    """SGLang's warm-up request (prefill only here), then the ready line."""
    state.pool.generate(model.encode("The capital city of France is"), 1)
    state.pool.serving = True
    state.ready = True
    state.log.info("The server is fired up and ready to roll!")


if __name__ == "__main__":
    main()
