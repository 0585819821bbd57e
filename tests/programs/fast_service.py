"""A fast SGLang-shaped DDTree service for fault tests and benchmarks (no torch, starts in ~50 ms).

Run as a program, it reads the verify width from the installed demo engine
(`ddtreed_demo_engine.cuda_graph_runner.target_verify_width`, found on PYTHONPATH). While the width
is the block size (the founding bug) every TP rank prints the founding traceback the way SGLang
does and the process dies by SIGKILL; once a patch made it budget + 1 it says it is ready and
serves /health, /health_generate and /generate, optionally logging decode lines.

Imported, `write_config()` writes a ddtreed config that supervises it (used by tests/test_faults*
and benchmarks/).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
FRAMES = (
    ("sglang/srt/managers/scheduler.py", 2984, "run_scheduler_process", "scheduler.event_loop_normal()"),
    ("sglang/srt/managers/scheduler.py", 1012, "event_loop_normal", "result = self.run_batch(batch)"),
    ("sglang/srt/speculative/dflash_worker.py", 731, "forward_batch_generation",
     "logits_output, can_run_cuda_graph = self.target_worker.model_runner.forward(verify_batch)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", 1306, "replay",
     "self.replay_prepare(forward_batch, pp_proxy_tensors)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", 1241, "replay_prepare",
     "self.input_ids[: self.raw_num_token].copy_(forward_batch.input_ids)"),
)
SITE = "/opt/venv/lib/python3.12/site-packages/"


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def founding_traceback(ranks: list[str], width: int = 8, budget: int = 32) -> str:
    """The founding crash as SGLang's schedulers print it: headers first, then each body."""
    lines = [f"[{stamp()} {rank}] Scheduler hit an exception: Traceback (most recent call last):"
             for rank in ranks]
    for _ in ranks:
        for path, number, function, code in FRAMES:
            lines += [f'  File "{SITE}{path}", line {number}, in {function}', f"    {code}"]
        lines += [f"RuntimeError: The size of tensor a ({width}) must match the size of tensor b "
                  f"({budget + 1}) at non-singleton dimension 0", ""]
    return "\n".join(lines) + "\n"


def decode_line(rank: str, step: int) -> str:
    return (f"[{stamp()} {rank}] Decode batch, #running-req: 4, #token: {1000 + step % 5000}, "
            f"token usage: 0.02, accept len: 3.41, accept rate: 0.43, cuda graph: True, "
            f"gen throughput (token/s): 812.55, #queue-req: 0,\n")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp-size", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--speculative-algorithm", type=str.upper, default="DDTREE")
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=8)
    parser.add_argument("--speculative-ddtree-budget", type=int, default=32)
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--lines-per-s", type=float, default=0.0, help="decode lines logged while serving")
    parser.add_argument("--crash-after", type=float, default=None,
                        help="crash with the founding traceback this long after start, patched or not")
    parser.add_argument("--events", default=None, help="append 'start|exit <time.time()>' lines here")
    parser.add_argument("--log-prompts", default=None, metavar="TEMPLATE",
                        help="log each /generate prompt to stderr as TEMPLATE.format(stamp=…, text=prompt): "
                             "the prompt written as-is, its own newlines included (a user's request logger)")
    parser.add_argument("--after-logged-prompt", choices=("serve", "exit", "hang", "child-dies"), default="serve",
                        help="after logging a multi-line prompt: keep serving, die (exit 1, no answer), stop "
                             "answering anything (what a real crash or hang does after printing the same text), "
                             "or lose a child process while the main one lingers answering /health (SGLang "
                             "0.5.16: its failed scheduler exits, the launcher outlives its SIGQUIT)")
    args, _unknown = parser.parse_known_args(argv)  # SGLang flags this stand-in does not model
    return args


def event(args: argparse.Namespace, what: str) -> None:
    if args.events:
        with open(args.events, "a") as handle:
            handle.write(f"{what} {time.time():.6f} {os.getpid()}\n")


def verify_width(args: argparse.Namespace) -> int:
    from ddtreed_demo_engine.cuda_graph_runner import target_verify_width

    server_args = SimpleNamespace(speculative_num_draft_tokens=args.speculative_num_draft_tokens,
                                  speculative_ddtree_budget=args.speculative_ddtree_budget,
                                  speculative_algorithm=args.speculative_algorithm)
    return target_verify_width(server_args)


def crash(args: argparse.Namespace, width: int) -> None:
    """Every rank prints the traceback, the main process reports the SIGQUIT and dies by SIGKILL."""
    ranks = [f"TP{rank}" for rank in range(args.tp_size)]
    sys.stderr.write(founding_traceback(ranks, width, args.speculative_ddtree_budget))
    sys.stderr.write(f"[{stamp()}] Received sigquit from a child process. It usually means the child failed.\n")
    sys.stderr.flush()
    event(args, "exit")
    os.kill(os.getpid(), signal.SIGKILL)


PROMPT_LOG: list[str] = []  # the --log-prompts template and --after-logged-prompt, once serving
CHILDREN: list[subprocess.Popen] = []  # with --after-logged-prompt child-dies: a stand-in scheduler
HUNG = threading.Event()  # set: every request waits forever (a hung server)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if HUNG.is_set():
            threading.Event().wait()
        if self.path in ("/health", "/health_generate"):
            self._send(200, b"")
        elif self.path in ("/server_info", "/get_server_info"):
            self._send(200, json.dumps({"version": "0.0.0+fast"}).encode())
        else:
            self._send(404, b"not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        payload = self.rfile.read(length)
        if self.path != "/generate":
            self._send(404, b"not found")
            return
        if PROMPT_LOG:
            try:
                text = json.loads(payload).get("text", "")
            except (ValueError, AttributeError):
                text = ""
            sys.stderr.write(PROMPT_LOG[0].format(stamp=stamp(), text=text) + "\n")
            sys.stderr.flush()
            if PROMPT_LOG[1] == "exit" and "\n" in text:  # a multi-line prompt: not the probes' own
                os._exit(1)
            if PROMPT_LOG[1] == "hang" and "\n" in text:
                HUNG.set()
                threading.Event().wait()
            if PROMPT_LOG[1] == "child-dies" and "\n" in text:
                for child in CHILDREN:  # the "scheduler" goes; this request is never answered
                    child.kill()
                    child.wait()
                threading.Event().wait()
        body = {"text": " Paris. The capital of France is Paris.",
                "meta_info": {"completion_tokens": 16, "spec_accept_length": 3.41, "spec_verify_ct": 5}}
        self._send(200, json.dumps(body).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # access lines would drown the decode lines
        pass


def serve(args: argparse.Namespace) -> None:
    if args.log_prompts:
        PROMPT_LOG[:] = [args.log_prompts, args.after_logged_prompt]
    if args.after_logged_prompt == "child-dies":
        CHILDREN.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"[{stamp()}] The server is fired up and ready to roll!", file=sys.stderr, flush=True)
    started = time.monotonic()
    step = 0
    ranks = [f"TP{rank}" for rank in range(args.tp_size)]
    while True:
        now = time.monotonic()
        if args.crash_after is not None and now - started >= args.crash_after:
            crash(args, args.speculative_num_draft_tokens)
        if args.lines_per_s > 0:
            due = int((now - started) * args.lines_per_s)
            while step < due:  # one write per line, as each rank's logger does
                sys.stdout.write(decode_line(ranks[step % len(ranks)], step))
                sys.stdout.flush()
                step += 1
        time.sleep(0.005 if args.lines_per_s > 0 or args.crash_after is not None else 0.5)


def main(argv: list[str]) -> None:
    args = parse(argv)
    event(args, "start")
    print(f"[{stamp()} TP0] Load weight begin. avail mem=94.10 GB", file=sys.stderr, flush=True)
    if args.crash_after is not None and args.crash_after <= 0:
        crash(args, args.speculative_num_draft_tokens)
    width = verify_width(args)
    if (args.speculative_algorithm == "DDTREE" and not args.disable_cuda_graph
            and width != args.speculative_ddtree_budget + 1):
        crash(args, width)
    serve(args)


# ---- used by tests and benchmarks: a ddtreed config that supervises this program -------------

def write_config(directory: Path, *, port: int, tp: int = 2, extra_args: tuple[str, ...] = (),
                 policy: dict | None = None, probe: dict | None = None, paths: dict | None = None,
                 service: dict | None = None) -> Path:
    """Install a fresh demo engine under `directory`, write `directory/ddtreed.toml`, return its path."""
    from ddtreed.demo import to_toml
    from ddtreed.demo.engine_install import install_engine

    directory = Path(directory).resolve()
    site_packages = directory / "site-packages"
    install_engine(site_packages)
    models = directory / "models"
    for name, config in (("target", {"architectures": ["DemoBigramForCausalLM"]}),
                         ("draft", {"architectures": ["DFlashDraftModel"], "block_size": 8})):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.json").write_text(json.dumps(config))
    argv = [sys.executable, str(Path(__file__).resolve()), "--model-path", str(models / "target"),
            "--tp-size", str(tp), "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", str(models / "draft"),
            "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32",
            "--page-size", "1", "--host", "127.0.0.1", "--port", str(port), *extra_args]
    tables = {
        "service": {"argv": argv, "python": sys.executable, "cwd": str(directory),
                    "env": {"PYTHONPATH": f"{site_packages}:{REPO}", "PYTHONUNBUFFERED": "1"},
                    "host": "127.0.0.1", "port": port, "site_packages": str(site_packages),
                    **(service or {})},
        "paths": {"log_dir": str(directory / "logs"), "state_dir": str(directory / "state"),
                  **(paths or {})},
        "policy": {"mode": "auto", "stop_grace_s": 2.0, "backoff_initial_s": 0.01,
                   "backoff_max_s": 0.5, "max_restarts": 5, "restart_window_s": 300.0,
                   **(policy or {})},
        "probe": {"startup_timeout_s": 20.0, "health_timeout_s": 5.0, "generate_timeout_s": 5.0,
                  "verify_window_s": 0.3, "poll_interval_s": 0.05, **(probe or {})},
        "preflight": {"enabled": False},  # these runs want the crash → fix path
        "canary": {"enabled": False},
    }
    path = directory / "ddtreed.toml"
    path.write_text(to_toml(tables))
    return path


def engine_file(directory: Path) -> Path:
    """The file the founding patch changes, in the site-packages of `write_config(directory)`."""
    return Path(directory).resolve() / "site-packages" / "ddtreed_demo_engine" / "cuda_graph_runner.py"


if __name__ == "__main__":
    main(sys.argv[1:])
