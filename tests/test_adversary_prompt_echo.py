"""A healthy service logging a user's multi-line prompt is no crash (session 9's adversarial pass):
user code in the service process (a request logger, a plain print) writes the prompt as-is, its
first line behind the logger's prefix and the rest unprefixed, and the prompt quotes a crash
report (a `Fatal Python error: Segmentation fault` dump, a `Caught signal 11` report, a CUDA
illegal-memory-access traceback). Those continuation lines read exactly as a crash the service
printed itself; the assembler cannot tell them apart, so only the service can: it stays alive and
keeps answering its health probes, and ddtreed must leave it running (the pid unchanged, no
remediation, at most an `observed` incident with no stop in its timeline). Real `ddtreed run`,
real server process (tests/programs/fast_service.py --log-prompts), real sqlite."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, wait_for  # noqa: E402
from supervision_helpers import free_port  # noqa: E402

from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.loop.daemon import EXIT_OK  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402
from ddtreed.testing import Launch, crashing  # noqa: E402
from ddtreed.tracebacks.assembler import assemble_lines  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loop_middle import Loop  # noqa: E402

PROMPTS = {
    "fatal-python-error": "\n".join([
        "Please explain this log:",
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f3c2a1ff640 (most recent call first):",
        '  File "/usr/lib/python3.12/site-packages/foo.py", line 12 in bar',
        '  File "/usr/lib/python3.12/threading.py", line 1010 in run',
        "",
        "Current thread 0x00007f3c3b2e4740 (most recent call first):",
        '  File "/usr/lib/python3.12/site-packages/foo.py", line 30 in main',
    ]),
    "caught-signal": "\n".join([
        "What does this mean?",
        "Caught signal 11 (Segmentation fault: address not mapped to object at address 0x49)",
        "==== backtrace (tid:   2817) ====",
        " 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f3c2a1ff2dc]",
    ]),
    "illegal-memory-access": "\n".join([
        "Why do I get this?",
        "Traceback (most recent call last):",
        '  File "/srv/app/train.py", line 40, in <module>',
        "    loss.backward()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.",
    ]),
}
# The logger's prefix on the first line only: a user's own logger, and one that borrows SGLang's tag.
TEMPLATES = {
    "user-logger": "[{stamp}] user prompt: {text}",
    "sglang-tag": "[{stamp} TP0] Receive: {text}",
}
CASES = [(prompt, template) for prompt in PROMPTS for template in TEMPLATES
         if template == "user-logger" or prompt == "fatal-python-error"]


def _logged(prompt: str, template: str) -> tuple[str, ...]:
    return tuple(TEMPLATES[template].format(stamp="2026-12-02 10:00:00", text=PROMPTS[prompt]).split("\n")) + ("",)


@pytest.mark.parametrize("prompt,template", CASES)
def test_the_loop_leaves_a_live_healthy_service_running_whatever_rule_the_text_names(tmp_path, prompt, template):
    """The real loop, rules and SQLite store on a scripted service that prints the lines and keeps
    serving, under policy auto: no stop, no remediation, one `observed` incident."""
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_lines=_logged(prompt, template),
                                                         crash_exit_code=None), stop_on=None)
    loop.clock.at(loop.clock.monotonic() + 300.0, loop.daemon.request_stop)
    assert loop.run() == EXIT_OK
    assert loop.outcomes == [] and len(loop.host.launches) == 1  # never stopped, never relaunched
    [incident] = loop.daemon.store.list_incidents()
    assert incident["status"] == "observed" and not loop.incident(incident["id"])["remediations"]
    assert loop.steps(incident["id"]) == ["detected", "diagnosed", "observed"]
    assert "crashed" not in loop.daemon.lifecycle.history


def test_the_loop_still_acts_when_the_service_dies_with_the_same_text(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(
        crash_after_s=30.0, crash_lines=_logged("illegal-memory-access", "user-logger")), policy={"mode": "off"})
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    incident = loop.incident(outcome.incident_id)
    assert incident["category"] == "illegal-memory-access" and incident["status"] == "open"
    assert "observed" not in loop.steps(outcome.incident_id) and "crashed" in loop.daemon.lifecycle.history


def test_a_fixed_service_logging_such_a_prompt_in_its_verification_window_keeps_its_fix(tmp_path):
    """After a fix, the restarted service is watched for a recurrence (the verification window); a
    prompt quoting a crash that it logs there while it stays up and healthy is no recurrence: the
    fix is kept and verified, the service not stopped again."""
    def behaviour(argv, env, start):
        if "--disable-cuda-graph" in argv:  # fixed; 20 s into its window it logs a user's prompt
            return Launch(crash_after_s=20.0, crash_lines=_logged("illegal-memory-access", "user-logger"),
                          crash_exit_code=None)
        return crashing()

    loop = Loop(tmp_path, behaviour)
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    incident = loop.incident(outcome.incident_id)
    assert (outcome.status, incident["remediation_id"]) == ("resolved", "disable-cuda-graph")
    assert loop.steps(outcome.incident_id) == ["detected", "diagnosed", "skipped", "applied", "restarting",
                                               "restarted", "healthy", "verified"]
    assert len(loop.host.launches) == 2  # the fixed service was not stopped for the text
    assert [i["status"] for i in loop.daemon.store.list_incidents() if i["id"] != outcome.incident_id] == ["observed"]


def _pre_patch(directory: Path) -> None:
    """The engine fixed before the first start: the service serves at once (no founding crash)."""
    engine = fast_service.engine_file(directory)
    anchor = "    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
    engine.write_text(engine.read_text().replace(anchor, anchor + (
        "    if server_args.speculative_algorithm == 'DDTREE':\n"
        "        num_tokens_per_bs = server_args.speculative_ddtree_budget + 1\n")))


def _running(state_dir: Path, daemon: DaemonProcess) -> bool:
    try:
        status = read_status(state_dir)
    except ValueError:
        return False
    return status is not None and status.pid == daemon.pid and status.state == "running"


@pytest.mark.parametrize("prompt,template", CASES)
def test_the_logged_prompt_reads_as_a_crash(prompt, template):
    """What makes the live case hard: as text, the logged prompt is a crash (the same lines a
    dying service prints), so the live decision cannot rest on the text."""
    logged = TEMPLATES[template].format(stamp="2026-12-02 10:00:00", text=PROMPTS[prompt])
    assert [crash for group in assemble_lines([*logged.split("\n"), ""]) for crash in group]


@pytest.mark.slow
@pytest.mark.parametrize("prompt,template", CASES)
def test_a_healthy_service_logging_a_prompt_that_quotes_a_crash_is_left_running(tmp_path, prompt, template):
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    config = fast_service.write_config(directory, port=port, policy={"max_restarts": 3},
                                       extra_args=("--log-prompts", TEMPLATES[template]))
    _pre_patch(directory)
    state_dir = directory / "state"
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        def generate(text: str) -> int:
            body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 8}}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status

        wait_for(lambda: _running(state_dir, daemon), 60, what="the daemon serving")
        service = read_status(state_dir).service_pid
        assert not daemon.has("incident_opened")  # a healthy start: no founding crash before the prompt
        assert generate(PROMPTS[prompt]) == 200
        wait_for(lambda: daemon.has("traceback_observed") or daemon.has("incident_opened"), 60,
                 what="the logged prompt judged")
        wrong = [{key: event.get(key) for key in ("event", "category", "rule", "reason")}
                 for event in daemon.events() if event.get("event") in ("service.stopping", "incident_opened")]
        assert wrong == []
        assert generate("The capital of France is") == 200  # still serving
        status = read_status(state_dir)
        assert status.state == "running" and status.service_pid == service and status.restarts == 0
        assert psutil.pid_exists(service)
        assert "CUDA_LAUNCH_BLOCKING" not in psutil.Process(service).environ()  # no remediation applied
        with Store(database_path(state_dir)) as store:
            assert store.applications() == []
            incidents = [store.get(i["id"]) for i in store.list_incidents()]
        # recorded at most as text seen in a live, healthy service: nothing stopped, nothing tried
        for incident in incidents:
            assert incident["status"] == "observed" and not incident["remediations"], incident
            assert {step["step"] for step in incident["steps"]} <= {"detected", "diagnosed", "observed"}, incident
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)


@pytest.mark.slow
@pytest.mark.parametrize("after", ["exit", "hang", "child-dies"])
def test_the_same_text_followed_by_a_death_or_a_hang_is_still_a_crash(tmp_path, after):
    """The other side: the same lines, and the service then dies (exit 1), stops answering
    anything (a hang), or loses a child process while its main process lingers and still answers
    /health (real SGLang 0.5.16 after a scheduler exception, device run r14b): the daemon stops
    it, records the crash under the rule the text names, and relaunches it."""
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    config = fast_service.write_config(directory, port=port, policy={"mode": "off", "max_restarts": 3},
                                       extra_args=("--log-prompts", TEMPLATES["user-logger"],
                                                   "--after-logged-prompt", after))
    _pre_patch(directory)
    state_dir = directory / "state"
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the daemon serving")
        service = read_status(state_dir).service_pid
        if after == "child-dies":  # the session's members known: a loss can confirm the text
            wait_for(lambda: daemon.has("service.members"), 30, what="the service's processes listed")
        body = json.dumps({"text": PROMPTS["illegal-memory-access"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body, method="POST")
        with pytest.raises(OSError):  # no answer: the server died, or hangs until it is stopped
            urllib.request.urlopen(request, timeout=30)
        wait_for(lambda: daemon.has("incident_opened"), 60, what="the crash recorded")
        [opened] = daemon.events("incident_opened")
        assert opened["category"] == "illegal-memory-access"
        wait_for(lambda: _running(state_dir, daemon) and read_status(state_dir).service_pid != service, 60,
                 what="the service relaunched")
        assert not psutil.pid_exists(service) or psutil.Process(service).status() == psutil.STATUS_ZOMBIE
        with Store(database_path(state_dir)) as store:
            [incident] = [store.get(i["id"]) for i in store.list_incidents()]
        assert incident["status"] != "observed" and incident["category"] == "illegal-memory-access"
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)
