# ruff: noqa: E501  (log lines are verbatim one-line messages)
"""Failures a log states only on error lines outside any traceback (issue 15, item 1): SGLang's
disaggregation schedulers log `Decode transfer failed for request … with exception
KVTransferError(…): …` (decode.py, `logger.error`) and keep serving; Mooncake's transfer engine
writes glog `E…` records. Offline `diagnose` judges those lines when nothing decisive was
assembled; a healthy log's request errors and warnings stay quiet, a traceback still decides,
and the live daemon's assembler still sees no crash in them."""

import json
import subprocess
import sys
from pathlib import Path

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks import assemble_lines
from ddtreed.tracebacks.error_lines import error_line_crashes

ROOT = Path(__file__).parent.parent
RULES = load_rules([shipped("rules")])
# A real SGLang 0.5.16 serving log: start-up, requests, two requests refused with HTTP 400
# (`[http_server] Error: The input (20000 tokens) is longer than the model's context length …`).
HEALTHY = (ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "basic.log").read_text().splitlines()
SERVING = [line for line in HEALTHY if "Prefill batch" in line or "Decode batch" in line or '" 200 OK' in line]

DECODE_TIMEOUT = ("[2026-03-02 11:03:35 DP6 TP6 EP6] Decode transfer failed for request rank=6 "
                  "decode_req.req.rid='cd00baf7d2fc4dcf8535c3a25f0288a3' decode_req.req.bootstrap_room=8360203925601259718 "
                  "with exception KVTransferError(bootstrap_room=8360203925601259718): Request 8360203925601259718 timed out after 300.0s in KVPoll.WaitingForInput")
DECODE_DEAD = ("[2026-03-02 16:00:13 TP{rank}] Decode transfer failed for request rank={rank} decode_req.req.rid='41ffeddd069d40b8b7efd4dc64585ebb' "
               "decode_req.req.bootstrap_room=887504041590801090 with exception KVTransferError(bootstrap_room=887504041590801090): "
               "Failed to get kvcache from prefill instance, it might be dead")
MOONCAKE_GLOG = ("E0302 16:02:26.014493   391 rdma_transport.cpp:542] Failed to register memory: addr 0x7f3da7e4c800 length 156176640")
HTTP_500 = '[2026-03-02 16:00:13] INFO:     10.0.0.7:57586 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
HEALTH_WARNING = ("[2026-03-02 10:20:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. "
                  "tic start time: 10:19:40. last_heartbeat time: 10:19:38")
OOM_TRACEBACK = [
    "[2026-03-02 16:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2510, in run_scheduler_process',
    "    scheduler.event_loop_normal_disagg_decode()",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1812, in forward',
    "    return self.forward_decode(forward_batch)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.02 GiB is free.",
    "",
]


def diagnoses_of(lines: list[str]) -> list:
    return diagnose_lines(lines, "<log>", RULES, None)


def test_a_decode_transfer_timeout_stated_only_on_its_error_line_is_diagnosed():
    log = HEALTHY[:60] + SERVING[:4] + [DECODE_TIMEOUT, HTTP_500] + SERVING[4:6]
    [diagnosis] = diagnoses_of(log)
    assert diagnosis.match.category == "nccl-error"
    assert diagnosis.match.rule_id == "pd-kv-transfer-timed-out"
    assert "timed out after 300.0s in KVPoll.WaitingForInput" in diagnosis.match.diagnosis
    assert any("error lines" in note for note in diagnosis.notes)


def test_every_ranks_copy_of_a_transfer_error_is_one_candidate_and_the_dead_peer_is_named():
    log = SERVING[:3] + [DECODE_DEAD.format(rank=rank) for rank in range(8)] + [HTTP_500]
    crashes = error_line_crashes(log)
    assert len(crashes) == 1 and crashes[0].exception == "KVTransferError" and crashes[0].rank == "TP0"
    [diagnosis] = diagnoses_of(log)
    assert diagnosis.match.rule_id == "pd-transfer-engine-failed"
    assert "prefill instance, it might be dead" in diagnosis.match.diagnosis


def test_a_transfer_engines_glog_error_record_alone_is_diagnosed():
    [diagnosis] = diagnoses_of(SERVING[:3] + [MOONCAKE_GLOG] + SERVING[3:5])
    assert diagnosis.match.rule_id == "pd-transfer-engine-failed"


def test_a_requests_failed_transfer_is_a_transfer_failure_unless_a_check_refused_it():
    aborted = ("[2026-03-02 16:39:09 TP0] Prefill transfer failed for request rank=0 req.rid='78fde411d57a4d7791b63963eac74968' "
               "req.bootstrap_room=4793981895866140836 with exception KVTransferError(bootstrap_room=4793981895866140836): Aborted by AbortReq.")
    [diagnosis] = diagnoses_of(SERVING[:3] + [aborted])
    assert diagnosis.match.rule_id == "pd-request-transfer-failed"
    refused = ("[2026-03-02 16:39:09] Prefill transfer failed for request rank=0 req.rid='5b02aee35dae49aba98a333ce89964e6' "
               "with exception PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.")
    assert not any(diagnosis.match.category == "nccl-error" for diagnosis in diagnoses_of(SERVING[:3] + [refused]))


def test_a_healthy_log_with_request_errors_and_a_health_warning_has_no_incident():
    log = HEALTHY[:70] + [HEALTH_WARNING] + HEALTHY[70:]
    assert any("[http_server] Error:" in line for line in log) and any('" 400 Bad Request' in line for line in log)
    assert error_line_crashes(log) == ()
    assert not any(RULES.decisive(diagnosis) for diagnosis in diagnoses_of(log))


def test_a_traceback_still_decides_over_an_error_line_before_it():
    [diagnosis] = diagnoses_of(SERVING[:3] + [DECODE_DEAD.format(rank=0)] + OOM_TRACEBACK)
    assert diagnosis.match.category == "cuda-oom"
    assert not any("error lines" in note for note in diagnosis.notes)


def test_lines_already_part_of_an_assembled_crash_are_not_candidates_again():
    log = SERVING[:2] + ["[2026-03-02 16:00:20 TP0] ERROR: KV cache pool is corrupted: " + "x" * 10] + SERVING[2:3]
    assert len(error_line_crashes(log)) == 1
    assert error_line_crashes(log, covered=((3, 3),)) == ()


def test_an_error_level_line_names_its_exception_class():
    [crash] = error_line_crashes(["ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"])
    assert crash.kind == "error-line" and crash.message.startswith("[Errno 98]")
    [crash] = error_line_crashes(["2026-03-02 10:00:00,001 - sglang.router - ERROR - worker failed: ConnectionError: refused"])
    assert crash.exception == "ConnectionError"


def test_an_exceptions_own_line_behind_a_log_prefix_is_an_error_line():
    # The traceback above it was not pasted (or a logger printed only `type: message`).
    line = "[2026-03-02 16:00:21 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    [crash] = error_line_crashes(SERVING[:3] + [line])
    assert (crash.exception, crash.message) == ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.")
    [diagnosis] = diagnoses_of(SERVING[:3] + [line])
    assert diagnosis.match.category == "cuda-oom" and any("error lines" in note for note in diagnosis.notes)
    # A line that merely mentions an exception class is no such line.
    assert error_line_crashes(SERVING[:3] + ["[2026-03-02 16:00:21 TP0] Retrying after ValueError: busy"]) == ()


def test_the_live_assembler_sees_no_crash_in_error_lines(tmp_path):
    lines = SERVING[:3] + [DECODE_TIMEOUT, MOONCAKE_GLOG] + SERVING[3:5]
    assert assemble_lines(lines, "<log>") == []
    log = tmp_path / "decode.log"
    log.write_text("\n".join(lines) + "\n")
    done = subprocess.run([sys.executable, "-m", "ddtreed", "diagnose", str(log), "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    [incident] = json.loads(done.stdout)["incidents"]
    assert incident["category"] == "nccl-error"
