# ruff: noqa: E501  (the lines are verbatim log lines)
"""A report pasted from `docker compose logs` or `kubectl logs` (every line behind the runtime's
prefix) is read as the lines behind the prefix: a paste of NCCL/NVSHMEM output is still mined for its
error, while a real SGLang log behind the same prefix stays a log (its healthy lines are no crash)."""

from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks.paste import looks_like_log

RULES = load_rules([shipped("rules")])
REAL = Path(__file__).parent / "fixtures" / "sglang-0.5.16"
PREFIXES = ["sglang-1  | ", "2026-03-24T12:06:12.101062401+08:00 stderr F "]

NVSHMEM = ["/sgl-workspace/nvshmem/src/host/transport/transport.cpp:400: non-zero status: 7 connect EPS failed",
           "/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem setup connections failed",
           "nvshmem setup connections failed"]
NCCL_INFO = ["node1:743:743 [2] NCCL INFO Channel 01/02 : 0 1",
             "node1:743:743 [2] NCCL INFO P2P Chunksize set to 131072",
             "node1:743:1278 [2] misc/socket.cc:50 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43214> failed : Connection refused",
             "node1:743:1278 [2] NCCL INFO transport/net_socket.cc:360 -> 6"]
USAGE = ["usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]",
         "launch_server.py: error: unrecognized arguments: --enable-reasoning"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("lines,category", [(NVSHMEM, "nccl-error"), (NCCL_INFO, "nccl-error"), (USAGE, "unsupported-config")])
def test_a_container_prefixed_paste_is_mined_like_the_lines_behind_the_prefix(prefix, lines, category):
    prefixed = [prefix + line for line in lines]
    assert not looks_like_log(prefixed)
    diagnoses = diagnose_lines(prefixed, "<paste>", RULES, None)
    assert diagnoses and diagnoses[0].match.category == category


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("name", ["basic.log", "dflash.log", "ngram.log", "width2.log"])
def test_a_healthy_real_log_behind_a_container_prefix_is_still_a_log_without_a_crash(prefix, name):
    prefixed = [prefix + line for line in (REAL / name).read_text().splitlines()]
    assert looks_like_log(prefixed)
    assert diagnose_lines(prefixed, name, RULES, None) == []


TRACEBACK = ["[2026-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process',
             "    scheduler.event_loop_overlap()",
             '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/parallel_state.py", line 500, in all_reduce',
             "    torch.distributed.all_reduce(input_, group=self.device_group)",
             "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
             "remote process exited or there was a network error, NCCL version 2.27.3"]


@pytest.mark.parametrize("shape", ["quoted", "quoted-tight", "trailing-blanks"])
def test_a_quoted_or_blank_padded_traceback_paste_is_assembled(shape):
    lines = {"quoted": ["> " + line for line in TRACEBACK], "quoted-tight": [">" + line for line in TRACEBACK],
             "trailing-blanks": [line + "   " for line in TRACEBACK]}[shape]
    lines = ["The server died with:", *lines, "", "Any idea?"]
    [diagnosis] = diagnose_lines(lines, "<paste>", RULES, None)
    assert (diagnosis.match.category, diagnosis.crash.exception) == ("nccl-error", "torch.distributed.DistBackendError")
    assert len(diagnosis.crash.frames) == 2


def test_a_code_fence_closes_a_traceback_cut_before_its_exception_line():
    # The reporter's next words are not the exception line of the cut traceback.
    lines = ["I got this error:", "```", *TRACEBACK[:5], "```", "Any idea?"]
    [diagnosis] = diagnose_lines(lines, "<paste>", RULES, None)
    assert diagnosis.crash.exception is None
    assert diagnosis.crash.message == "traceback cut off before its exception line"


def test_a_traceback_copied_from_a_pages_html_source_is_read_unescaped():
    import html

    lines = ["The server died with:", *(html.escape(line, quote=True) for line in TRACEBACK)]
    assert "&quot;" in lines[2]
    [diagnosis] = diagnose_lines(lines, "<paste>", RULES, None)
    assert (diagnosis.match.category, len(diagnosis.crash.frames)) == ("nccl-error", 2)


@pytest.mark.parametrize("outer,inner", [
    ("2026-03-24T12:06:12.101062401+08:00 stderr F ", "sglang-1  | "),  # a CRI record of a compose service's line
    ("sglang-1  | ", "sglang_service-1  | "),  # a compose service that runs compose (its own services' prefixes)
])
def test_stacked_container_prefixes_all_come_off(outer, inner):
    lines = [outer + inner + line for line in TRACEBACK]
    [diagnosis] = diagnose_lines(lines, "<paste>", RULES, None)
    assert (diagnosis.match.category, diagnosis.crash.exception) == ("nccl-error", "torch.distributed.DistBackendError")
    assert [frame.function for frame in diagnosis.crash.frames] == ["run_scheduler_process", "all_reduce"]


def test_the_live_assembler_reads_a_traceback_behind_stacked_prefixes():
    from ddtreed.tracebacks import assemble_lines

    [group] = assemble_lines(["sglang-1  | sglang_service-1  | " + line for line in TRACEBACK], "<log>")
    [crash] = group
    assert crash.exception == "torch.distributed.DistBackendError" and len(crash.frames) == 2
