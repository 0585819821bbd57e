#!/usr/bin/env python3
"""The real-SGLang tier's scenarios: the real `ddtreed run` supervising real `sglang.launch_server`.

Runs on a GPU machine where `scripts/gpu-real-sglang.sh` has unpacked the SGLang bundle into
SITE and made the tiny model. Each scenario writes a ddtreed config, starts `python3 -m ddtreed
run --config …` as a user would, acts on the service (requests, kills, a GPU hog, a taken port,
a width mismatch injected into the installed sglang files), waits on ddtreed's own status file,
stops ddtreed with SIGTERM and reads the incidents back with `ddtreed incidents --json`.

usage: real_sglang_scenarios.py OUT_DIR SCENARIO...   (see SCENARIOS; `all` runs every one)
Prints one JSON line per scenario and writes OUT_DIR/results.json.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

SITE = os.environ.get("REAL_SGLANG_SITE", "/tmp/site")
MODEL = os.environ.get("REAL_SGLANG_MODEL", "/tmp/model")
DRAFT = os.environ.get("REAL_SGLANG_DRAFT", "/tmp/dflash_draft")
WORK = Path(os.environ.get("REAL_SGLANG_WORK", "/tmp/rs"))
PYTHON = sys.executable
SERVICE_ENV = {
    "PYTHONPATH": SITE, "PATH": f"{SITE}/bin:" + os.environ.get("PATH", "/usr/bin:/bin"),
    "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "TVM_FFI_CACHE_DIR": "/tmp/jitcache", "TRITON_CACHE_DIR": "/tmp/tritoncache",
    "FLASHINFER_WORKSPACE_BASE": "/tmp/fi", "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
}
RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
WIDTH_LINE = ("        self.captured_req_width = model_runner.decode_num_tokens_per_req(\n"
              "            num_draft_tokens=self.speculative_num_draft_tokens\n"
              "        )\n")
T0 = time.monotonic()


def now() -> float:
    return round(time.monotonic() - T0, 3)


def say(*parts) -> None:
    print(f"[{now():8.1f}s]", *parts, flush=True)


# ---- the daemon as a user runs it ----------------------------------------------------------------

class Ddtreed:
    def __init__(self, name: str, port: int, flags: list[str], *, preflight: bool = True,
                 probe: dict | None = None, canary: dict | None = None, policy: dict | None = None):
        self.name, self.port = name, port
        self.dir = WORK / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state = self.dir / "state"
        argv = [PYTHON, "-m", "sglang.launch_server", "--model-path", MODEL, "--host", "127.0.0.1",
                "--port", str(port), "--attention-backend", "triton", "--sampling-backend", "pytorch",
                "--enable-metrics", *flags]
        config = {
            "service": {"argv": argv, "python": PYTHON, "env": SERVICE_ENV, "host": "127.0.0.1",
                        "port": port, "site_packages": SITE},
            "paths": {"log_dir": str(self.dir / "logs"), "state_dir": str(self.state)},
            "policy": {"stop_grace_s": 30.0, "backoff_initial_s": 1.0, "backoff_max_s": 5.0,
                       "max_restarts": 6, "restart_window_s": 1800.0, **(policy or {})},
            "probe": {"startup_timeout_s": 420.0, "health_timeout_s": 30.0,
                      "generate_timeout_s": 60.0, "verify_window_s": 10.0, "serving_interval_s": 2.0,
                      "serving_timeout_s": 5.0, "serving_failures": 2, **(probe or {})},
            "preflight": {"enabled": preflight},
            "canary": {"enabled": True, "max_new_tokens": 32, "timeout_s": 90.0, **(canary or {})},
        }
        self.config = self.dir / "ddtreed.toml"
        self.config.write_text(_toml(config))
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "ddtreed.log"

    def start(self, log_name: str = "ddtreed.log", env_extra: dict | None = None) -> None:
        env = {**os.environ, **(env_extra or {})}
        self.started = now()
        self.log = self.dir / log_name
        self.proc = subprocess.Popen([PYTHON, "-m", "ddtreed", "run", "--config", str(self.config),
                                      "--log-format", "console"], stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        say(self.name, "ddtreed run started, pid", self.proc.pid)

    def status(self) -> dict:
        """The snapshot of the ddtreed this object started; a snapshot an earlier run left (a run
        cut off by the command's time limit) is not it (`ddtreed status` calls that stale)."""
        try:
            snapshot = json.loads((self.state / "daemon-state.json").read_text())
        except (OSError, ValueError):
            return {}
        if self.proc is not None and snapshot.get("pid") != self.proc.pid:
            return {}
        return snapshot

    def wait(self, predicate, timeout: float, what: str) -> float | None:
        """Seconds until predicate(status) held, or None at the timeout (or ddtreed's exit)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            status = self.status()
            if predicate(status):
                return round(time.monotonic() - started, 3)
            if self.proc is not None and self.proc.poll() is not None:
                say(self.name, f"ddtreed exited rc {self.proc.returncode} while waiting for {what}")
                return None
            time.sleep(0.05)
        say(self.name, f"timeout after {timeout:.0f}s waiting for {what}; state",
            self.status().get("state"), self.status().get("status_text"))
        return None

    def running(self, timeout: float = 420.0, after_start: float | None = None) -> float | None:
        """Until ddtreed says `running` (verified healthy) for a service started after `after_start`."""
        def ok(status):
            return status.get("state") == "running" and (
                after_start is None or (status.get("service_started_at") or 0) > after_start)
        return self.wait(ok, timeout, "running")

    def incidents(self) -> list[dict]:
        done = subprocess.run([PYTHON, "-m", "ddtreed", "incidents", "--config", str(self.config),
                               "--json"], capture_output=True, text=True, timeout=60)
        try:
            listed = json.loads(done.stdout)
        except ValueError:
            return [{"error": (done.stdout + done.stderr)[-500:]}]
        rows = listed if isinstance(listed, list) else listed.get("incidents", [])
        full = []
        for row in rows:
            shown = subprocess.run([PYTHON, "-m", "ddtreed", "incidents", "show", str(row["id"]),
                                    "--config", str(self.config), "--json"], capture_output=True,
                                   text=True, timeout=60)
            try:
                full.append(json.loads(shown.stdout))
            except ValueError:
                full.append(row)
        return full

    def count(self) -> int:
        rows = self.incidents()
        return len([r for r in rows if "error" not in r])

    def sigterm(self, timeout: float = 120.0) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            return {"rc": None if self.proc is None else self.proc.returncode, "already_exited": True}
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return {"rc": rc, "stop_s": round(time.monotonic() - started, 3)}

    def service_log(self) -> str:
        parts = []
        for name in ("service.stdout.log", "service.stderr.log"):
            for path in sorted((self.dir / "logs").glob(name + "*")):
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


def _toml(config: dict) -> str:
    lines = []
    for section, values in config.items():
        simple = {k: v for k, v in values.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in simple.items()]
        for key, table in tables.items():
            lines.append(f"[{section}.{key}]")
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


# ---- helpers -------------------------------------------------------------------------------------

def post(port: int, payload: dict, timeout: float = 60.0) -> tuple[int | None, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except OSError as error:
        return None, f"{type(error).__name__}: {error}"


def get(port: int, path: str, timeout: float = 10.0) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except OSError as error:
        return None, f"{type(error).__name__}: {error}"


def children(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def child_named(pid: int, prefix: str):
    for child in children(pid):
        try:
            if child.name().startswith(prefix[:15]) or prefix in " ".join(child.cmdline()):
                return child
        except Exception:
            continue
    return None


def gpu_processes() -> list[dict]:
    try:
        import pynvml

        pynvml.nvmlInit()
        rows = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                rows.append({"gpu": index, "pid": proc.pid,
                             "used_mib": (proc.usedGpuMemory or 0) // 2**20})
        pynvml.nvmlShutdown()
        return rows
    except Exception as error:  # noqa: BLE001 - evidence, not control flow
        return [{"error": str(error)}]


def wait_gpu_free(timeout: float = 30.0) -> tuple[float | None, list]:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        rows = [r for r in gpu_processes() if "pid" in r]
        if not rows:
            return round(time.monotonic() - started, 3), []
        time.sleep(0.2)
    return None, gpu_processes()


def leftovers() -> list[dict]:
    """sglang processes still alive (by command line), killed by pid so the next scenario is clean."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status", "ppid"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            named = (proc.info["name"] or "").startswith("sglang::")
            if proc.pid != os.getpid() and ("sglang.launch_server" in cmd or named):
                # a zombie (exited, its parent has not reaped it: an empty command line) holds no
                # memory or GPU; it is listed apart so it is not read as a survivor of the stop
                found.append({"pid": proc.pid, "name": proc.info["name"], "cmd": cmd[:120],
                              "status": proc.info["status"], "ppid": proc.info["ppid"]})
                proc.kill()
        except psutil.Error:
            continue
    return found


def log_facts(text: str) -> dict:
    return {
        "draining": "Draining requests and shutting down" in text,
        "gracefully_exiting": "Gracefully exiting" in text,
        "scheduler_killed_by_sigterm": "crashed with exit code -15" in text,
        "cuda_graph_false_decode_lines": len(re.findall(r"Decode batch.*cuda graph: False", text)),
        "cuda_graph_true_decode_lines": len(re.findall(r"Decode batch.*cuda graph: True", text)),
        "ready_lines": text.count("The server is fired up and ready to roll!"),
        "bind_errors": text.count("error while attempting to bind"),
        "sigquit_lines": text.count("SIGQUIT received"),
        # every prefill's cached-token count: the canary's requests (own extra_key) must show 0
        "prefill_cached_tokens": [int(n) for n in re.findall(r"Prefill batch.*?#cached-token: (\d+)", text)][:40],
    }


def _epoch(value) -> float | None:
    from datetime import datetime

    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def summary(incidents: list[dict]) -> list[dict]:
    rows = []
    for incident in incidents:
        steps = incident.get("steps") or []
        rows.append({
            "id": incident.get("id"), "status": incident.get("status"), "source": incident.get("source"),
            "category": incident.get("category"), "rule": incident.get("rule_id"),
            "service": incident.get("service"), "remediation": incident.get("remediation_id"),
            "outcome": incident.get("outcome"), "message": (incident.get("message") or "")[:200],
            "steps": [(s.get("step"), (s.get("detail") or "")[:160]) for s in steps],
            "diagnosis": (incident.get("diagnosis") or "")[:300],
        })
    return rows


def step_times(incident: dict) -> dict:
    """Seconds from the incident's start (its detection) to the first of each step."""
    started = _epoch(incident.get("started_at"))
    times = {}
    for step in incident.get("steps") or []:
        name, at = step.get("step"), _epoch(step.get("at"))
        if at is not None and started is not None and name not in times:
            times[name] = round(at - started, 3)
    return times


# ---- width injection into the installed sglang (a fork's wheel with its RECORD) -----------------

def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def inject_width(offset: int) -> dict:
    """Capture the target verify graph `offset` tokens wider/narrower than the verify batches use,
    on the line where 0.5.16 computes the captured width; RECORD updated to the edited file, as a
    fork's wheel would list it. +1: capture fails; -1: decode silently runs eagerly."""
    path = Path(SITE) / RUNNER
    text = path.read_text()
    original = path.with_suffix(".py.real-sglang-orig")
    if not original.exists():
        original.write_text(text)
    text = original.read_text()
    assert WIDTH_LINE in text, "0.5.16's captured-width line not found"
    edited = text.replace(WIDTH_LINE, WIDTH_LINE.rstrip("\n") + f" {'+' if offset > 0 else '-'} {abs(offset)}"
                          "  # injected: a fork's captured width\n", 1)
    path.write_text(edited)
    _set_record(RUNNER, edited.encode())
    return {"file": str(path), "offset": offset, "record": record_hash(edited.encode())}


def restore_width() -> None:
    path = Path(SITE) / RUNNER
    original = path.with_suffix(".py.real-sglang-orig")
    if original.exists():
        path.write_text(original.read_text())
        _set_record(RUNNER, original.read_bytes())
        original.unlink()


def _set_record(relative: str, data: bytes) -> None:
    record = next(Path(SITE).glob("sglang-*.dist-info/RECORD"))
    lines = record.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.split(",", 1)[0] == relative:
            lines[index] = f"{relative},{record_hash(data)},{len(data)}"
    record.write_text("\n".join(lines) + "\n")


def runner_state() -> dict:
    text = (Path(SITE) / RUNNER).read_text()
    return {"injected": "# injected" in text, "ddtreed_marker": "ddtreed:" in text}


# ---- scenarios -----------------------------------------------------------------------------------

NGRAM = ["--speculative-algorithm", "NGRAM"]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFT]


def bad_requests(port: int) -> dict:
    overflow = post(port, {"text": "word " * 20000, "sampling_params": {"max_new_tokens": 4}})
    negative = post(port, {"text": "x", "sampling_params": {"temperature": -3}})
    return {"context_overflow": overflow[0], "context_overflow_body": overflow[1][:200],
            "bad_temperature": negative[0], "bad_temperature_body": negative[1][:200]}


def py_spy_probe(pid: int) -> list[dict]:
    """Which py-spy invocation works on this machine (the README saw one fail)."""
    attempts = []
    scheduler = child_named(pid, "sglang::scheduler")
    for target in ([scheduler.pid] if scheduler else []) + [pid]:
        for extra in ([], ["--native"], ["--nonblocking"]):
            try:
                done = subprocess.run([f"{SITE}/bin/py-spy", "dump", "--pid", str(target), *extra],
                                      capture_output=True, text=True, timeout=10)
                attempts.append({"pid": target, "scheduler": bool(scheduler and target == scheduler.pid),
                                 "args": extra, "rc": done.returncode,
                                 "out": (done.stdout or done.stderr)[-400:]})
                if done.returncode == 0:
                    break
            except (OSError, subprocess.TimeoutExpired) as error:
                attempts.append({"pid": target, "args": extra, "error": str(error)})
    return attempts


def scenario_ngram(result: dict) -> Ddtreed:
    """Healthy NGRAM; 400s; scheduler -9; detokenizer -9; SIGTERM drains."""
    d = Ddtreed("ngram", 30010, NGRAM)
    d.start()
    result["ready_s"] = d.running()
    status = d.status()
    result["healthy_status"] = {k: status.get(k) for k in ("state", "status_text", "last_accept_length",
                                                           "canary", "restarts")}
    result["requests"] = bad_requests(d.port)
    time.sleep(2)
    result["after_bad_requests"] = {"state": d.status().get("state"), "incidents": d.count()}
    result["py_spy"] = py_spy_probe(d.status().get("service_pid") or 0)
    for child in ("scheduler", "detokenizer"):
        pid = d.status().get("service_pid")
        target = child_named(pid, f"sglang::{child}")
        before, killed_at = d.count(), time.time()
        if target is None:
            result[f"kill_{child}"] = {"error": f"no sglang::{child} under pid {pid}"}
            continue
        target.send_signal(signal.SIGKILL)
        mark = time.monotonic()
        detect = d.wait(lambda s: s.get("current_incident_id") or s.get("state") in
                        ("diagnosing", "remediating", "restarting", "starting", "backoff"), 120,
                        f"{child} death noticed")
        healthy = d.running(300, after_start=killed_at) if detect is not None else None
        result[f"kill_{child}"] = {"pid": target.pid, "noticed_s": detect, "healthy_again_s":
                                   None if healthy is None else round(time.monotonic() - mark, 3),
                                   "incidents_added": d.count() - before}
    return d


def scenario_dflash(result: dict) -> Ddtreed:
    d = Ddtreed("dflash", 30011, DFLASH)
    d.start()
    result["ready_s"] = d.running()
    status = d.status()
    result["healthy_status"] = {k: status.get(k) for k in ("state", "status_text", "last_accept_length",
                                                           "canary")}
    result["requests"] = bad_requests(d.port)
    time.sleep(2)
    result["after_bad_requests"] = {"state": d.status().get("state"), "incidents": d.count()}
    return d


def scenario_kvpool(result: dict) -> Ddtreed:
    d = Ddtreed("kvpool", 30012, ["--mem-fraction-static", "1e-05"], policy={"max_restarts": 3})
    d.start()
    result["ready_s"] = d.running(360)
    return d


def scenario_hog(result: dict) -> Ddtreed:
    """Another process holds all but ~3 GiB of the GPU (real 0.5.16 then dies in graph buffers)."""
    hog = subprocess.Popen([PYTHON, "-c", (
        "import torch, time, sys\n"
        "free, total = torch.cuda.mem_get_info()\n"
        "x = torch.empty(int(free - 3 * 2**30), dtype=torch.uint8, device='cuda')\n"
        "print('hog holds', x.numel() // 2**20, 'MiB', flush=True)\n"
        "time.sleep(3600)\n")], stdout=subprocess.PIPE, text=True)
    result["hog"] = {"pid": hog.pid, "line": hog.stdout.readline().strip()}
    try:
        d = Ddtreed("hog", 30013, [], policy={"max_restarts": 2})
        d.start()
        verdict = d.wait(lambda s: s.get("state") in ("blocked", "running", "gave-up"), 240,
                         "a verdict on the hog")
        status = d.status()
        result["verdict"] = {"after_s": verdict, **{k: status.get(k) for k in
                                                    ("state", "status_text", "restarts")}}
        if status.get("state") == "blocked":
            # The holder lets go while ddtreed waits: it must relaunch by itself (30 s re-check;
            # SIGHUP asks for the re-check now, as an operator would) and verify the service.
            time.sleep(3)
            hog.kill()
            hog.wait()
            released = time.time()
            result["hog_released_at"] = released
            if d.proc is not None:
                d.proc.send_signal(signal.SIGHUP)
            result["healthy_after_release_s"] = d.running(420, after_start=released)
        time.sleep(3)
        result["final_status"] = {k: d.status().get(k) for k in ("state", "status_text", "restarts")}
        result["stop"] = d.sigterm()
    finally:
        hog.kill()
        hog.wait()
    return d


def scenario_portinuse(result: dict, preflight: bool = True) -> Ddtreed:
    """Another server answers HTTP 200 on the service's port. With preflight (default `block_on`
    names port-in-use) the launch is blocked before the model load, and goes ahead once the port is
    freed; without it, SGLang's bind error after the load is the incident and no false ready."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = 30014 if preflight else 30015
    holder.bind(("127.0.0.1", port))
    holder.listen(16)
    # something that answers HTTP 200 on the port, like another server would
    server = subprocess.Popen([PYTHON, "-c", (
        "import socket, sys\n"
        "from http.server import HTTPServer, BaseHTTPRequestHandler\n"
        "class H(BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Length','0'); self.end_headers()\n"
        "    do_POST = do_GET\n"
        "    def log_message(self, *a): pass\n"
        "s = HTTPServer(('127.0.0.1', 0), H, bind_and_activate=False)\n"
        f"s.socket = socket.fromfd({holder.fileno()}, socket.AF_INET, socket.SOCK_STREAM)\n"
        "s.serve_forever()\n")], pass_fds=(holder.fileno(),))
    holder.close()
    try:
        d = Ddtreed("portinuse" if preflight else "portinuse-nopreflight", port, [], preflight=preflight,
                    policy={"max_restarts": 2})
        d.start()
        verdict = d.wait(lambda s: s.get("state") in ("blocked", "running", "escalated") or
                         s.get("current_incident_id") or (s.get("restarts") or 0) >= 1,
                         240 if not preflight else 60, "a verdict on the port")
        time.sleep(2)
        status = d.status()
        result["verdict_s"] = verdict
        result["verdict_status"] = {k: status.get(k) for k in ("state", "status_text", "restarts", "service_pid")}
        result["launched_while_taken"] = bool(status.get("service_pid"))
    finally:
        server.kill()
        server.wait()
    freed = time.time()
    if preflight and result["verdict_status"].get("state") == "blocked":
        # freed: the blocked launch is re-checked (every 30 s, or at once on SIGHUP)
        d.proc.send_signal(signal.SIGHUP)
        result["running_after_free_s"] = d.running(300, after_start=freed)
    result["final_status"] = {k: d.status().get(k) for k in ("state", "status_text", "restarts")}
    result["stop"] = d.sigterm()
    return d


def scenario_orphan(result: dict) -> Ddtreed:
    """ddtreed is SIGKILLed while its service serves (the service is left holding the GPU and the
    port); the next `ddtreed run` finds the leftover of its own service by its record and removes
    it before it launches, instead of OOMing or blocking on the port."""
    d = Ddtreed("orphan", 30018, [])
    d.start("ddtreed-1.log")
    result["ready_s"] = d.running()
    pid = d.status().get("service_pid")
    tree = [pid] + [c.pid for c in children(pid)] if pid else []
    d.proc.kill()
    d.proc.wait()
    time.sleep(1)
    result["orphan"] = {"service_pid": pid, "tree": tree, "gpu": gpu_processes(),
                        "alive": [p for p in tree if _alive(p)]}
    restarted = time.time()
    d.start("ddtreed-2.log")
    result["ready_again_s"] = d.running(420, after_start=restarted)
    result["orphan_left_alive"] = [p for p in tree if _alive(p)]
    result["new_service_pid"] = d.status().get("service_pid")
    return d


def serving_scheduler(d: Ddtreed, result: dict):
    """(service pid, its sglang::scheduler child); the child None, with `result["error"]` said, when
    there is none to kill."""
    pid = d.status().get("service_pid")
    scheduler = child_named(pid, "sglang::scheduler") if pid else None
    if scheduler is None:
        result["error"] = f"no sglang::scheduler under pid {pid}"
    return pid, scheduler


def scenario_killmid(result: dict) -> Ddtreed:
    """ddtreed is SIGKILLed in the middle of an incident, before any fix (its own kill point
    `incident:committed`, reached when the killed scheduler's incident row is committed); the next
    `ddtreed run` stops the leftover service, closes that incident as `interrupted` (nothing had been
    changed), not `reverted`, and serves again."""
    d = Ddtreed("killmid", 30021, [], canary={"enabled": False})
    d.start("ddtreed-1.log", env_extra={"DDTREED_KILL_AT": "incident:committed"})
    result["ready_s"] = d.running()
    pid, scheduler = serving_scheduler(d, result)
    if scheduler is None:
        return d
    tree = [pid] + [c.pid for c in children(pid)]
    killed_at = time.time()
    scheduler.send_signal(signal.SIGKILL)
    try:
        d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        result["error"] = "ddtreed did not reach its kill point within 60 s of the scheduler's kill"
        return d
    result["ddtreed_died"] = {"rc": d.proc.returncode, "after_kill_s": round(time.time() - killed_at, 3),
                              "service_alive": [p for p in tree if _alive(p)]}
    restarted = time.time()
    d.start("ddtreed-2.log")
    result["ready_again_s"] = d.running(420, after_start=restarted)
    result["old_tree_left_alive"] = [p for p in tree if _alive(p)]
    first = [i for i in d.incidents() if i.get("id") == 1]
    result["incident_1"] = ({k: first[0].get(k) for k in ("status", "outcome", "category")}
                            | {"rule": first[0].get("rule_id")}) if first else None
    return d


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def scenario_width(result: dict, offset: int) -> Ddtreed:
    result["injected"] = inject_width(offset)
    d = Ddtreed("width-capture" if offset > 0 else "width-silent", 30016 if offset > 0 else 30017, NGRAM,
                policy={"max_restarts": 3})
    d.start()
    d.wait(lambda s: s.get("state") == "running" and s.get("service_started_at"), 420, "running")
    if offset < 0:  # the silent face: serve, and let the decode lines speak
        for _ in range(6):
            post(d.port, {"text": "one two three four five six seven eight nine ten " * 6,
                          "sampling_params": {"max_new_tokens": 256, "temperature": 0, "ignore_eos": True}})
        d.wait(lambda s: s.get("current_incident_id") or s.get("state") != "running", 60,
               "the eager fallback noticed")
        d.running(360, after_start=time.time() - 1)
    result["final_status"] = {k: d.status().get(k) for k in ("state", "status_text", "restarts")}
    result["runner_after"] = runner_state()
    if d.status().get("state") == "running":
        for _ in range(3):
            post(d.port, {"text": "one two three four five six seven eight nine ten " * 6,
                          "sampling_params": {"max_new_tokens": 256, "temperature": 0, "ignore_eos": True}})
        time.sleep(1)
        metrics = get(d.port, "/metrics")[1]
        result["graph_metrics"] = [line for line in metrics.splitlines()
                                   if line.startswith("sglang:cuda_graph_passes_total")
                                   or line.startswith("sglang:is_cuda_graph")][:8]
    return d


SCHEDULER = "sglang/srt/managers/scheduler.py"
GENERATE_DEF = ("    def handle_generate_request(\n        self,\n        recv_req: TokenizedGenerateReqInput,\n"
                "    ):\n")
CRASH_MARK = "DDTREED-SERVING-CRASH"
# A prompt that quotes crash reports over several lines: real SGLang's request log (--log-requests)
# writes it as one repr line; the daemon must leave the service alone.
QUOTED_CRASH = ("Please explain this log:\nFatal Python error: Segmentation fault\n\n"
                "Thread 0x00007f3a2b7fe640 (most recent call first):\n  File \"/opt/app/x.py\", line 12 in run\n"
                "Traceback (most recent call last):\n  File \"/opt/app/x.py\", line 3, in <module>\n"
                "RuntimeError: CUDA error: an illegal memory access was encountered\n")


def inject_serving_crash() -> dict:
    """The scheduler raises on a request whose text holds CRASH_MARK: a real serving-time crash
    (0.5.16's run_scheduler_process logs `Scheduler hit an exception` and SIGQUITs the launcher)."""
    path = Path(SITE) / SCHEDULER
    original = path.with_suffix(".py.real-sglang-orig")
    if not original.exists():
        original.write_text(path.read_text())
    text = original.read_text()
    assert GENERATE_DEF in text, "0.5.16's handle_generate_request not found"
    edited = text.replace(GENERATE_DEF, GENERATE_DEF + (
        f"        if {CRASH_MARK!r} in str(getattr(recv_req, 'input_text', None) or ''):  # injected\n"
        "            raise RuntimeError('CUDA error: an illegal memory access was encountered')\n"), 1)
    path.write_text(edited)
    _set_record(SCHEDULER, edited.encode())
    return {"file": str(path), "record": record_hash(edited.encode())}


def restore_serving_crash() -> None:
    path = Path(SITE) / SCHEDULER
    original = path.with_suffix(".py.real-sglang-orig")
    if original.exists():
        path.write_text(original.read_text())
        _set_record(SCHEDULER, original.read_bytes())
        original.unlink()


def scenario_servecrash(result: dict) -> Ddtreed:
    """While serving: (1) a multi-line prompt quoting crash reports, logged by SGLang's own request
    log: no incident that stops anything, the same service pid; (2) a real scheduler exception on
    a request (injected): SGLang's tree goes down, ddtreed records, diagnoses, relaunches."""
    result["injected"] = inject_serving_crash()
    try:
        d = Ddtreed("servecrash", 30019, ["--log-requests", "--log-requests-level", "2"],
                    policy={"max_restarts": 3})
        d.start()
        result["ready_s"] = d.running()
        pid = d.status().get("service_pid")
        answer = post(d.port, {"text": QUOTED_CRASH, "sampling_params": {"max_new_tokens": 8}})
        time.sleep(6)  # longer than the daemon's settle wait and health probe
        status = d.status()
        result["after_quoted_crash"] = {"http": answer[0], "state": status.get("state"),
                                        "same_service_pid": status.get("service_pid") == pid,
                                        "restarts": status.get("restarts"), "incidents": d.count()}
        sent = time.time()
        result["crash_request"] = post(d.port, {"text": CRASH_MARK + " one two three",
                                                "sampling_params": {"max_new_tokens": 8}}, timeout=30)[0]
        result["crash_sent_at"] = sent
        result["healthy_again_s"] = d.running(420, after_start=sent)
        result["new_service_pid"] = d.status().get("service_pid")
    finally:
        restore_serving_crash()
    return d


def probe_connections(pid: int, port: int) -> set[int]:
    """Local ports of ddtreed's (pid's) TCP connections to the service port now: one per request in
    flight (every probe request is its own `Connection: close` connection)."""
    import psutil

    try:
        process = psutil.Process(pid)
        listed = process.net_connections(kind="tcp") if hasattr(process, "net_connections") \
            else process.connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.port for c in listed if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"}


def wait_long_request(pid: int, port: int, held_s: float, timeout: float) -> float | None:
    """Seconds until one of pid's connections to `port` has stayed open `held_s`, or None."""
    started = time.monotonic()
    first_seen: dict[int, float] = {}
    while (now_s := time.monotonic()) - started < timeout:
        open_now = probe_connections(pid, port)
        first_seen = {p: first_seen.get(p, now_s) for p in open_now}
        if any(now_s - at >= held_s for at in first_seen.values()):
            return round(now_s - started, 3)
        time.sleep(0.005)
    return None


def scenario_probekill(result: dict) -> Ddtreed:
    """A detokenizer killed -9 while the loop's own post-incident verification /generate is in flight
    (device run s15b: that request waited out generate_timeout_s, 60 s, and the crash was read then).

    The scheduler is killed first (incident 1, relaunched, resolved "restarted; healthy"); the loop
    then verifies the running service again (health, then /generate) before it watches it. That
    /generate is found from ddtreed's side, not by timing: the probe asks for 3000 tokens (the
    model's context is 4096), so it runs long on the tiny model where the 1-token /health_generate
    before it lasts milliseconds, and the kill is sent once one of ddtreed's own connections to the
    service port has stayed open 0.15 s after the state turned `running`. No canary (its requests
    are requests of their own). Recorded: how long after the kill the detokenizer's incident was
    detected (its row's `started_at`), and what the daemon logged about the probe it cut."""
    d = Ddtreed("probekill", 30020, NGRAM, canary={"enabled": False},
                probe={"generate_max_new_tokens": 3000, "generate_timeout_s": 60.0})
    d.start()
    result["ready_s"] = d.running()
    pid, scheduler = serving_scheduler(d, result)
    if scheduler is None:
        return d
    killed_at = time.time()
    scheduler.send_signal(signal.SIGKILL)
    resolved = d.running(300, after_start=killed_at)  # incident 1 resolved: its relaunch verified
    result["kill_scheduler"] = {"pid": scheduler.pid, "healthy_again_s": resolved}
    if resolved is None:
        return d
    pid = d.status().get("service_pid")
    detokenizer = child_named(pid, "sglang::detokenizer")
    in_flight = wait_long_request(d.proc.pid, d.port, held_s=0.15, timeout=30.0)
    if detokenizer is None or in_flight is None:
        result["kill_detokenizer"] = {"error": f"detokenizer {detokenizer}, verification /generate seen "
                                               f"after {in_flight} s (None: not seen within 30 s)"}
        return d
    before = {i.get("id") for i in d.incidents()}
    killed_at = time.time()
    detokenizer.send_signal(signal.SIGKILL)
    mark = time.monotonic()
    noticed = d.wait(lambda s: s.get("current_incident_id") is not None or s.get("state") in
                     ("diagnosing", "remediating", "restarting", "starting", "backoff"), 120,
                     "detokenizer death noticed")
    healthy = d.running(300, after_start=killed_at) if noticed is not None else None
    added = [i for i in d.incidents() if i.get("id") not in before]
    ours = [i for i in added if "detokenizer" in (i.get("message") or "")]
    started = _epoch(ours[0].get("started_at")) if ours else None
    said = [line.strip()[:300] for line in d.log.read_text(errors="replace").splitlines()
            if "verify.probe_failed" in line or "probe.sent_again" in line]
    result["kill_detokenizer"] = {
        "pid": detokenizer.pid, "generate_in_flight_after_running_s": in_flight, "noticed_s": noticed,
        "detected_after_kill_s": None if started is None else round(started - killed_at, 3),
        "incident": ours[0].get("id") if ours else None, "kinds_added": [
            [c.get("kind") for c in (i.get("tracebacks") or [])] for i in added],
        "healthy_again_s": None if healthy is None else round(time.monotonic() - mark, 3),
        "incidents_added": len(added), "probe_failed_lines": said[-5:]}
    return d


SCENARIOS = {
    "probekill": scenario_probekill,
    "ngram": scenario_ngram,
    "dflash": scenario_dflash,
    "kvpool": scenario_kvpool,
    "hog": scenario_hog,
    "portinuse": scenario_portinuse,
    "orphan": scenario_orphan,
    "portinuse-nopreflight": lambda r: scenario_portinuse(r, preflight=False),
    "width-capture": lambda r: scenario_width(r, +1),
    "width-silent": lambda r: scenario_width(r, -1),
    "servecrash": scenario_servecrash,
    "killmid": scenario_killmid,
}


def run(name: str, out: Path) -> dict:
    result: dict = {"scenario": name, "started_s": now()}
    daemon = None
    try:
        daemon = SCENARIOS[name](result)
    except Exception:  # noqa: BLE001 - one scenario's failure is its result, the next still runs
        result["error"] = traceback.format_exc()[-2000:]
    if daemon is not None:
        if "stop" not in result:
            status = daemon.status()
            result["final_status"] = result.get("final_status") or {
                k: status.get(k) for k in ("state", "status_text", "restarts", "last_accept_length")}
            result["stop"] = daemon.sigterm()
        result["gpu_free_after_s"], result["gpu_after"] = wait_gpu_free()
        text = daemon.service_log()
        result["service_log_facts"] = log_facts(text)
        incidents = daemon.incidents()
        result["incidents"] = summary(incidents)
        result["step_times"] = {str(i.get("id")): step_times(i) for i in incidents}
        (out / "raw").mkdir(exist_ok=True)
        (out / "raw" / f"{name}.incidents.json").write_text(json.dumps(incidents, indent=1, default=str))
        (out / "raw" / f"{name}.service.log").write_text(text)
        logs = sorted(daemon.dir.glob("ddtreed*.log"))
        (out / "raw" / f"{name}.ddtreed.log").write_text("\n".join(p.read_text(errors="replace") for p in logs))
    if name.startswith("width"):
        restore_width()
    if name == "servecrash":
        restore_serving_crash()
    result["leftovers_killed"] = leftovers()
    result["finished_s"] = now()
    print(json.dumps({k: v for k, v in result.items() if k not in ("py_spy",)}, default=str)[:3000],
          flush=True)
    return result


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(
        description="Run ddtreed against real SGLang scenarios (device machine only); "
                    "results go to OUT/results.json.")
    parser.add_argument("out", metavar="OUT", help="directory for the scenarios' files and results.json")
    parser.add_argument("names", metavar="SCENARIO", nargs="*",
                        help=f"scenario names, or `all`; known: {', '.join(sorted(SCENARIOS))}")
    args = parser.parse_args(argv)
    out = Path(args.out)
    names = list(SCENARIOS) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    for name in names:
        results.append(run(name, out))
        results_path.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
