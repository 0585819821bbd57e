"""A healthy server's request log quoting a user's words is no crash (session 8's adversarial pass,
attack 4, found beside the new rules): SGLang's `--log-requests` prints every request's input and
output on a tagged line (`Receive: obj=GenerateReqInput(text=…)`, `Finish: obj=…, out={…}`); a
prompt that quotes a crash report (`Caught signal 11 (Segmentation fault …`, `*** SIGSEGV …`) must
not read as a fatal line, or the daemon stops and relaunches a service that serves. The real loop,
rules and SQLite store on a scripted service; the real assembler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.testing import READY_LINE, Launch
from ddtreed.tracebacks.assembler import assemble_lines

sys.path.insert(0, str(Path(__file__).parent))
from test_loop_middle import Loop  # noqa: E402

QUOTES = (
    "UCX said: Caught signal 11 (Segmentation fault: address not mapped to object at address 0x49)",
    "*** SIGSEGV (@0x0) received by PID 2817 (TID 0x7f3c) from PID 0; stack trace: ***",
    "my job printed Segmentation fault (core dumped), why?",
    "NCCL watchdog got stuck, Heartbeat monitor timed out",
    "Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered",
)
ECHOES = tuple(line for quote in QUOTES for line in (
    f"[2026-12-01 08:00:00 TP0] Receive: obj=GenerateReqInput(text={quote!r}, sampling_params={{'n': 1}})",
    f"[2026-12-01 08:00:01] Finish: obj=GenerateReqInput(text={quote!r}), out={{'text': 'It means ...'}}",
))


@pytest.mark.parametrize("line", ECHOES)
def test_a_request_log_line_quoting_a_crash_report_is_no_crash(line):
    assert assemble_lines([line, ""]) == []


def test_a_real_fatal_line_in_the_same_log_is_still_a_crash():
    groups = assemble_lines(["[2026-12-01 08:00:02 TP0] Caught signal 11 (Segmentation fault: address not mapped)", ""])
    assert groups and groups[0][0].kind != "traceback"


def test_a_healthy_server_logging_such_requests_is_not_restarted(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(lines=(READY_LINE,), crash_after_s=1.0, crash_lines=ECHOES,
                                                         crash_exit_code=None), stop_on=None, policy={"mode": "off"})
    loop.clock.at(loop.clock.now + 60.0, loop.daemon.request_stop)
    assert loop.run() == EXIT_OK
    assert loop.daemon.store.list_incidents() == []
    assert len(loop.host.launches) == 1
