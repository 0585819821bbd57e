# ruff: noqa: E501  (log lines are verbatim one-line messages)
"""Which crash of a multi-crash log is the cause (issue 15, item 2: the first cause, not the last
echo). Real-shaped logs and reports, as `ddtreed diagnose` reads them: an earlier error a specific
rule knows, then what it set off (the launcher finding the scheduler dead, another rank's collective
failing, the warm-up request refused); and the opposite order, where the later crash is the cause
and the earlier text only a notice, which must still decide for the later one."""

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from phrasing_helpers import traceback_text

RULES = load_rules([shipped("rules")])

FWD = ["sglang/srt/managers/scheduler.py:event_loop_overlap", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]
LOGITS = FWD + ["sglang/srt/layers/logits_processor.py:forward"]
ALL_REDUCE = FWD + ["sglang/srt/distributed/communication_op.py:tensor_model_parallel_all_reduce",
                    "sglang/srt/distributed/parallel_state.py:all_reduce"]
POOL = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/model_executor/model_runner.py:__init__", "sglang/srt/model_executor/model_runner.py:init_memory_pool"]
LAUNCHER = ["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:launch_server",
            "sglang/srt/entrypoints/engine.py:_launch_subprocesses"]

NONE_BUG = "TypeError: 'NoneType' object is not subscriptable"
NCCL_REMOTE = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
               "remote process exited or there was a network error, NCCL version 2.21.5\n"
               "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.")
WATCHDOG = ("[rank1]:[E1201 10:15:00.000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.")
KV_POOL = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
DEAD = "RuntimeError: Rank 0 scheduler is dead. Please check if there are relevant logs."
SIGQUIT = "[2026-05-01 10:00:01] Received sigquit from a child process. It usually means the child failed."


def tb(frames, last):
    return traceback_text(frames, last)


def diagnosis_of(text: str):
    diagnoses = diagnose_lines(text.splitlines(), "<report>", RULES, None)
    assert diagnoses, "nothing diagnosed"
    return diagnoses[0]


def test_an_exception_message_ends_at_the_reports_code_fence():
    # The reporter pasted rank 0's error in one block and the other rank's timeout in the next:
    # the timeout is the echo of rank 0's error, not a line of its message.
    report = "\n".join([
        "With --tp 2 the server crashes on the first request:", "```", tb(LOGITS, NONE_BUG), "```",
        "and the other rank prints", "```", WATCHDOG, "```"])
    diagnosis = diagnosis_of(report)
    assert diagnosis.crash.exception == "TypeError"
    assert "Watchdog" not in diagnosis.crash.message
    assert diagnosis.match.category == "other", diagnosis.match.rule_id


def test_another_ranks_collective_failure_after_an_error_is_its_echo_when_ranks_are_not_named():
    # Two tracebacks pasted without rank prefixes: the collective that failed because the other
    # rank was gone does not decide over that rank's own error.
    report = "\n".join([tb(LOGITS, NONE_BUG), "", tb(ALL_REDUCE, NCCL_REMOTE)])
    diagnosis = diagnosis_of(report)
    assert (diagnosis.match.category, diagnosis.crash.exception) == ("other", "TypeError"), diagnosis.match.rule_id


def test_a_collective_failure_before_another_error_still_decides():
    # The opposite order: the collective failed first, the other error came after it.
    report = "\n".join([tb(ALL_REDUCE, NCCL_REMOTE), "", tb(LOGITS, NONE_BUG)])
    assert diagnosis_of(report).match.category == "nccl-error"


def test_the_error_a_report_quotes_decides_over_the_launchers_notice_that_the_scheduler_died():
    # The scheduler's own error is only quoted in the prose; the traceback pasted is the launcher's.
    report = "\n".join([
        f"The server dies during start-up with `{KV_POOL}`", "Full log:", "```", SIGQUIT,
        tb(LAUNCHER, DEAD), "```"])
    diagnosis = diagnosis_of(report)
    assert diagnosis.match.category == "kv-pool-too-small", diagnosis.match.rule_id


def test_the_launchers_notice_alone_is_still_read():
    report = "\n".join(["The server does not start:", "```", SIGQUIT, tb(LAUNCHER, DEAD), "```"])
    diagnosis = diagnosis_of(report)
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("other", "scheduler-reported-dead")


@pytest.mark.parametrize("first", [
    tb(LAUNCHER, DEAD),
    tb(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup", "requests/api.py:post", "requests/adapters.py:send"],
       "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded with url: /generate (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))"),
], ids=["scheduler-dead", "warm-up-refused"])
def test_a_notice_pasted_before_the_schedulers_traceback_does_not_decide(first):
    # Reporters often paste what their terminal showed last first: the cause comes later.
    report = "\n".join(["I got:", "```", first, "```", "and in the server log:", "```",
                        tb(POOL, KV_POOL), "```"])
    assert diagnosis_of(report).match.category == "kv-pool-too-small"


def test_the_schedulers_inline_error_decides_over_the_launchers_notice():
    log = "\n".join([
        "[2026-05-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-05-01 10:00:01 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.64 GiB of which 900.00 MiB is free.",
        SIGQUIT, tb(LAUNCHER, DEAD)])
    assert diagnosis_of(log).match.category == "cuda-oom"


def test_the_error_a_report_quotes_decides_over_the_warm_up_requests_refusal():
    report = "\n".join([
        "When I launch the server with `--enable-dp-attention --tp 8 --dp 8` it fails:", "",
        "`ValueError: DP attention is not supported with --enable-mixed-chunk`", "", "and then the client shows:", "```",
        tb(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup", "requests/api.py:get", "requests/adapters.py:send"],
           "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded with url: /get_model_info (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))"),
        "```"])
    assert diagnosis_of(report).match.category == "unsupported-config"


def test_a_notice_quoted_again_is_still_the_notice():
    # A training framework's client giving up, pasted twice and once cut: its own `raise` line,
    # read as a quoted error with the report's other frames, is no new cause.
    client = ["areal/launcher/main.py:<module>", "areal/launcher/main.py:main",
              "areal/engine/sglang_remote.py:initialize", "areal/engine/sglang_remote.py:_wait_for_server"]
    raised = tb(client, "RuntimeError: server launch failed").replace("    something()\nRuntimeError",
                                                                      '    raise RuntimeError("server launch failed")\nRuntimeError')
    report = "\n".join([raised, raised, "\n".join(raised.splitlines()[:4])])
    diagnosis = diagnosis_of(report)
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("other", "client-gave-up-on-server-launch")


INDEX_ERROR = ["[2026-01-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
               '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2865, in run_scheduler_process',
               "    scheduler.event_loop_overlap()",
               '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/schedule_batch.py", line 300, in filter_batch',
               "    keep = [i for i in keep_indices if self.reqs[i].finished() is False]",
               "IndexError: list index out of range", ""]
HANG = ["[2026-01-01 10:10:00 TP1] Watchdog timeout (self.watchdog_timeout=300)",
        "[2026-01-01 10:10:00 TP1] self.cur_batch.batch_size()=4, self.cur_batch.reqs=[Req(rid=1)]",
        "[2026-01-01 10:10:00 TP1] Pyspy dump for PID 1234:",
        'Thread 1234 (active): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:2501)",
        "    forward (sglang/srt/layers/linear.py:1000)"]


def test_another_ranks_watchdog_after_a_ranks_own_error_is_its_echo():
    # Rank 0 died on its own error; rank 1 sat in the all-reduce waiting for it until SGLang's
    # watchdog fired five minutes later.
    log = ["[2026-01-01 10:00:00] The server is fired up and ready to roll!", *INDEX_ERROR, *HANG, SIGQUIT]
    diagnosis = diagnosis_of("\n".join(log))
    assert (diagnosis.match.category, diagnosis.crash.exception) == ("other", "IndexError"), diagnosis.match.rule_id
    assert len(diagnosis.crashes) == 2  # the hang stays in the incident, it does not decide
    [set_aside] = [o for o in diagnosis.outvoted if o.category == "scheduler-watchdog-timeout"]
    assert "echo of the first cause" in set_aside.reason  # --explain and --json say why it lost


def test_a_watchdog_that_fires_first_still_decides():
    log = ["[2026-01-01 10:00:00] The server is fired up and ready to roll!", *HANG, *INDEX_ERROR, SIGQUIT]
    assert diagnosis_of("\n".join(log)).match.category == "scheduler-watchdog-timeout"


def test_a_requests_error_the_http_side_answered_does_not_make_a_later_hang_its_echo():
    request = ["[2026-01-01 10:04:00] ERROR:    Exception in ASGI application",
               "Traceback (most recent call last):",
               '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/tokenizer_manager.py", line 600, in _validate_one_request',
               "    raise ValueError(",
               "ValueError: The input (50000 tokens) is longer than the model's context length (32768 tokens).", ""]
    log = ["[2026-01-01 10:00:00] The server is fired up and ready to roll!", *request, *HANG, SIGQUIT]
    assert diagnosis_of("\n".join(log)).match.category == "scheduler-watchdog-timeout"


@pytest.mark.parametrize("lines", [
    # torchrun's per-rank prefixes: rank 1's watchdog line right under rank 0's error line
    ["[rank0]: Traceback (most recent call last):",
     '[rank0]:   File "/sgl-workspace/sglang/python/sglang/srt/layers/logits_processor.py", line 300, in forward',
     "[rank0]:     pruned_states = hidden_states[last_index]",
     f"[rank0]: {NONE_BUG}",
     "[rank1]:" + WATCHDOG.split("]:", 1)[1]],
    # no prefixes at all: the C++ logger's record under the Python error line
    [*tb(LOGITS, NONE_BUG).splitlines(), WATCHDOG.split("]:", 1)[1]],
], ids=["torchrun-ranks", "glog-record"])
def test_an_exception_message_ends_at_another_writers_line(lines):
    diagnosis = diagnosis_of("\n".join(lines))
    assert diagnosis.crash.exception == "TypeError"
    assert diagnosis.crash.message == "'NoneType' object is not subscriptable"
    assert diagnosis.match.category == "other", diagnosis.match.rule_id
    assert len(diagnosis.crashes) == 2  # the watchdog line is a crash of its own, the echo


def test_a_messages_own_continuation_lines_stay_in_it():
    # torch's CUDA error text spans lines; none of them is another writer's.
    lines = ["[rank0]: Traceback (most recent call last):",
             '[rank0]:   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1500, in forward_extend',
             "[rank0]:     return self.model.forward(",
             "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
             "[rank0]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
             "[rank0]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1"]
    diagnosis = diagnosis_of("\n".join(lines))
    assert diagnosis.crash.message.count("\n") == 2
    assert diagnosis.match.category == "illegal-memory-access"
