"""A healthy server's handled request error that quotes a user's words is no crash (session 8's
adversarial pass, attack 4): source-families-3.toml's native-report and router rules read what a
signal handler or the router printed about a process that died or was dropped; a Python traceback
logged by a server that still runs and answers cannot be such a report, so those words in it (a
prompt asking why a program segfaults, echoed in a 400 error) must not make the daemon stop and
relaunch it. Real `ddtreed run`, real server process, real sqlite."""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, wait_for  # noqa: E402
from supervision_helpers import free_port  # noqa: E402

from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.tracebacks.assembler import assemble_lines  # noqa: E402

PROGRAMS = Path(__file__).resolve().parent / "programs"
# Handled request errors whose text quotes what a user sent (a prompt, a stop word).
ECHOES = (
    "ValueError: Invalid request: the prompt 'Why does my C program segfault after free()?' is longer than "
    "the model's context (8192 tokens)",
    "KeyError: 'segfault'",
    "ValueError: stop sequence 'seg fault' is not allowed",
    "ValueError: Invalid request: the prompt 'Caught signal 11 (Segmentation fault: address not mapped' "
    "is not valid JSON",
    "ValueError: Invalid request: the prompt 'All retry attempts failed' was refused",
    "ValueError: Invalid request: the prompt 'Removing failed worker: http://10.0.0.5:30000' was refused",
    # source-families-4's router start-up rule: the router's words quoted in a live server's error
    "ValueError: Invalid request: the prompt 'Worker http://10.0.0.5:30000 health check is pending with "
    "status: 503' was refused",
    "ValueError: Invalid request: the prompt 'Timeout 300s waiting for workers [http://10.0.0.5:30000] to "
    "become healthy' was refused",
)


def _handled(message: str) -> tuple:
    lines = ["[2026-12-01 08:00:00] ERROR:    Exception in ASGI application",
             "Traceback (most recent call last):",
             '  File "/usr/lib/python3.12/site-packages/starlette/routing.py", line 74, in app',
             "    response = await f(request)",
             '  File "/srv/handled_errors_service.py", line 19, in handle_bad_request',
             "    raise ValueError(text)", message, ""]
    return tuple(crash for group in assemble_lines(lines) for crash in group)


@pytest.mark.parametrize("message", ECHOES)
def test_words_of_a_native_report_in_a_live_handled_error_do_not_decide_a_crash(message):
    rules = load_rules([shipped("rules")])
    crashes = _handled(message)
    assert len(crashes) == 1 and crashes[0].kind == "traceback"
    diagnosis = rules.diagnose(crashes)
    assert not rules.decides_live(diagnosis), diagnosis.match.rule_id


def test_a_real_native_report_still_decides():
    """The same rules still diagnose the report itself, and offline (`ddtreed diagnose`) nothing
    changes: a glog report is the fatal-signal category, decisive."""
    rules = load_rules([shipped("rules")])
    lines = ["*** SIGSEGV (@0x0) received by PID 2817 (TID 0x7f3c) from PID 0; stack trace: ***"]
    crashes = tuple(crash for group in assemble_lines(lines) for crash in group)
    diagnosis = rules.diagnose(crashes)
    assert diagnosis.match.category == "fatal-signal" and rules.decisive(diagnosis)
    echo = rules.diagnose(_handled(ECHOES[0]))
    assert echo.match.rule_id == "native-crash-reported-by-signal-handler" and rules.decisive(echo)


SERVICE = (
    "import sys\n"
    f"sys.path.insert(0, {str(PROGRAMS)!r})\n"
    "import handled_errors_service as service\n"
    "def bad():\n"
    f"    raise ValueError({ECHOES[0][len('ValueError: '):]!r})\n"
    "service.handle_bad_request = bad\n"
    "service.main(sys.argv[1:])\n"
)


@pytest.mark.slow
def test_a_healthy_server_echoing_segfault_in_a_handled_error_is_not_restarted(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    config = fast_service.write_config(directory, port=port, policy={"max_restarts": 3},
                                       service={"argv": [sys.executable, "-c", SERVICE, "--port", str(port)]})
    state_dir = directory / "state"
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        def running() -> bool:
            try:
                status = read_status(state_dir)
            except ValueError:
                return False
            return status is not None and status.pid == daemon.pid and status.state == "running"

        wait_for(running, 60, what="the daemon serving")
        service = read_status(state_dir).service_pid
        for _ in range(2):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/boom", data=b"{}", method="POST")
            try:
                urllib.request.urlopen(request, timeout=5)
            except urllib.error.HTTPError as error:
                assert error.code == 500

        def incidents() -> list[dict]:
            with Store(database_path(state_dir)) as store:
                return [store.get(i["id"]) for i in store.list_incidents()]

        wait_for(lambda: daemon.has("traceback_observed") or daemon.has("service.stopping"), 60,
                 what="the traceback judged")
        time.sleep(1.0)  # room for a wrong stop to show
        assert not daemon.has("service.stopping")
        status = read_status(state_dir)
        assert status.service_pid == service and status.restarts == 0 and status.state == "running"
        assert psutil.pid_exists(service)
        wait_for(lambda: incidents() and all(i["status"] == "observed" for i in incidents()), 60,
                 what="the incident recorded as observed")
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)
