# ruff: noqa: E501  (the lines are verbatim one-line log lines)
"""Evidence printed outside Python tracebacks, kept by the assembler (ddtreed/tracebacks/native_lines.py):
communication failure lines before a death without a traceback, the NPU lines under an Ascend
exception line, a crash announced on one prefixed line. Every real 0.5.16 log keeps exactly the
crashes it had: a healthy run gains nothing, and its NCCL warnings are no failure."""

import gzip
from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.records import LogChunk
from ddtreed.rules import load_rules
from ddtreed.tracebacks import assemble_lines
from ddtreed.tracebacks.assembler import Assembler
from ddtreed.tracebacks.native_lines import comm_failure

RULES = load_rules([shipped("rules")])
HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "sglang-0.5.16"
SHARED = Path("/work/shared/real-sglang/logs")


def real_logs():
    paths = sorted(REAL.glob("*.log")) + sorted(REAL.glob("h200-run/*.log.gz"))
    if SHARED.is_dir():
        paths += sorted(SHARED.glob("*.log"))
    return paths


def read(path: Path) -> list[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", errors="replace").read().splitlines()
    return path.read_text(errors="replace").splitlines()


# What each real log assembles to: (kind, exit code) per crash of each group. The H200 service
# logs of the daemon's runs, the recorded 0.5.16 logs, their copies in shared/.
EXPECTED = {
    "basic.log": [], "dflash.log": [], "ngram.log": [], "width2.log": [],
    "ck_scheduler.log": [[("child-death", -9)]],
    "bad_dflash_nodraft.log": [[("traceback", None)]], "bad_unknown_flag.log": [[("error-line", None)]],
    "hog_3.log": [[("traceback", None)]], "memfrac_1e-5.log": [[("traceback", None)]],
    "portinuse.log": [[("error-line", None)]], "width.log": [[("traceback", None)]],
    "dflash.service.log.gz": [[("child-death", -15), ("child-death", -15)]],
    "dflash-r7.service.log.gz": [[("child-death", -15)]],
    "ngram.service.log.gz": [[("child-death", -9), ("child-death", -9)]],
    "ngram-r5.service.log.gz": [[("child-death", -9), ("child-death", -9)]],
    "orphan-r7.service.log.gz": [], "portinuse-blocked-r6.service.log.gz": [], "width-silent-r8.service.log.gz": [],
    "width-silent.service.log.gz": [[("child-death", -15)]],
    "portinuse.service.log.gz": [[("error-line", None), ("child-death", -15)]],
    "portinuse-nopreflight.service.log.gz": [[("error-line", None), ("child-death", -15), ("traceback", None)]],
    "hog.service.log.gz": [[("traceback", None)]], "width-capture.service.log.gz": [[("traceback", None)]],
    "kvpool-r7.service.log.gz": [[("traceback", None)]], "kvpool.service.log.gz": [[("traceback", None)] * 4],
}


@pytest.mark.parametrize("path", real_logs(), ids=lambda p: p.name)
def test_a_real_log_keeps_its_crashes_and_no_nccl_line_counts_as_a_failure(path):
    lines = read(path)
    groups = assemble_lines(lines)
    if path.name in EXPECTED:
        assert [[(c.kind, c.exit_code) for c in group] for group in groups] == EXPECTED[path.name]
    assert not [line for line in lines if comm_failure(line)]
    for group in groups:
        for crash in group:
            assert not any(comm_failure(line) for line in crash.context)


def test_torchs_exit_warning_of_every_healthy_run_is_no_failure():
    line = ("[rank0]:[W1201 08:12:11.870387643 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
            "was not called before program exit, which can leak resources.")
    assert comm_failure(line) is None
    assert any("destroy_process_group" in text for text in read(REAL / "width2.log"))


# Failure lines as NCCL (misc/socket.cc, transport/net_ib.cc, shmutils.cc, proxy.cc), torch's
# c10d (TCPStore.cpp, socket.cpp, ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp), NVSHMEM and DeepEP
# print them; and lines that name a transport but report nothing failed.
FAILURES = [
    "node1:1234:5678 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.1.1.1<38017> failed : Software caused connection abort",
    "node1:1234:5678 [3] transport/net_ib.cc:2000 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1",
    "node1:1234:5678 [1] include/shmutils.h:40 NCCL WARN Error: failed to extend /dev/shm/nccl-Kq1bY9 to 9637892 bytes, error: No space left on device (28)",
    "node1:1234:5679 [1] proxy.cc:1400 NCCL WARN [Proxy Service 1] Failed to execute operation Connect from rank 1, retcode 3",
    "node1:1234:5679 [0] misc/socket.cc:50 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.2<43214> failed : Connection reset by peer",
    "node1:1234:5678 [0] bootstrap.cc:100 NCCL WARN Bootstrap : no socket interface found",
    "[E1201 10:00:00.000000000 TCPStore.cpp:1050] [c10d] TCP client failed to connect/validate to host 10.0.0.1:29500 - timed out (try=0, timeout=600000ms)",
    "[rank1]:[E1201 10:00:00.000000 ProcessGroupNCCL.cpp:1682] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error",
    "[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization failed, exiting",
]
NOT_FAILURES = [
    "node1:1234:5678 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "node1:1234:5678 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "node1:1234:5678 [0] misc/cudawrap.cc:33 NCCL WARN Cannot initialize CollNet, using point-to-point network instead",
    "[W1201 10:00:00.000000 socket.cpp:663] [c10d] The client socket has failed to connect to [node0]:29500 (errno: 111 - Connection refused).",
    "[W1201 10:00:00 TCPStore.cpp:300] [c10d] TCP client failed to connect/validate to host node0:29500 - retrying (try=0, timeout=600000ms, delay=500ms): connection refused",
    "[rank0]:[W1201 08:00:31.399327825 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources.",
    "[2026-01-01 10:00:00 TP0] NCCL version 2.27.3+cuda12.9",
]


@pytest.mark.parametrize("line", FAILURES)
def test_a_transport_failure_line_is_recognised(line):
    assert comm_failure(line)


@pytest.mark.parametrize("line", NOT_FAILURES)
def test_a_transport_line_that_reports_no_failure_is_not(line):
    assert comm_failure(line) is None


SERVING = "[2026-01-01 10:00:00] The server is fired up and ready to roll!"
DECODE = "[2026-01-01 10:00:01 TP0] Decode batch, #running-req: 1, #token: 76, token usage: 0.00, cuda graph: True, gen throughput (token/s): 778.08, #queue-req: 0"


def death(code: int) -> str:
    return f"[2026-01-01 10:05:00] Subprocess scheduler_0 (pid=4242) crashed with exit code {code}. Triggering SIGQUIT for cleanup..."


@pytest.mark.parametrize("line", FAILURES[:6])
def test_a_death_while_serving_after_an_nccl_failure_line_is_a_communication_failure(line):
    log = [SERVING, DECODE, line, death(-6), "[2026-01-01 10:05:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed."]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("nccl-error", "child-died-after-comm-warnings")
    assert diagnosis.crash.context[0] == line.strip()


@pytest.mark.parametrize("code", [-9, -11])
def test_a_sigkill_or_a_segfault_is_not_explained_by_the_nccl_lines_before_it(code):
    # After the OOM killer takes one rank, the others' transports fail because it died.
    log = [SERVING, DECODE, FAILURES[4], death(code)]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category != "nccl-error"
    assert "comm-failure" not in diagnosis.evidence.message_families


def test_a_benign_nccl_warning_before_a_death_does_not_decide_it():
    log = [SERVING, NOT_FAILURES[2], DECODE, death(-6)]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category != "nccl-error"
    assert diagnosis.crash.context == ("last milestone: " + SERVING.split("] ", 1)[1],)


def test_a_failure_line_long_before_the_death_or_before_a_later_milestone_does_not_count():
    far = [SERVING, FAILURES[0]] + [DECODE] * 250 + [death(-6)]
    assert diagnose_lines(far, "<log>", RULES, None)[0].match.category != "nccl-error"
    recovered = ["[2026-01-01 10:00:00 TP0] Init torch distributed begin.", FAILURES[0],
                 "[2026-01-01 10:00:30 TP0] Load weight begin. avail mem=78.00 GB", death(-6)]
    assert diagnose_lines(recovered, "<log>", RULES, None)[0].crash.context == (
        "last milestone: Load weight begin. avail mem=78.00 GB",)


def test_a_silent_sigquit_after_a_store_failure_is_a_communication_failure():
    log = [SERVING, FAILURES[6].replace("TCPStore.cpp", "socket.cpp").replace("TCP client failed to connect/validate to host", "recvValue failed on SocketImpl, Failed to recv, got 0 bytes from"),
           "[2026-01-01 10:05:00] Received sigquit from a child process. It usually means one child failed."]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category == "nccl-error"


def test_the_live_assembler_joins_stdout_nccl_lines_to_a_death_on_stderr():
    # The daemon reads a service's stdout (NCCL writes there) and stderr (SGLang's logger) apart.
    assembler = Assembler(settle_s=1.0)
    assembler.feed(LogChunk("stderr.log", 1, (SERVING, DECODE), 100.0))
    assembler.feed(LogChunk("stdout.log", 1, (FAILURES[1],), 101.0))
    assembler.feed(LogChunk("stderr.log", 3, (death(-6),), 102.0))
    [[crash]] = assembler.take(110.0)
    assert crash.kind == "child-death" and crash.context[0] == FAILURES[1]
    assert RULES.diagnose((crash,)).match.category == "nccl-error"
    # ... but not one printed minutes earlier on the other stream
    later = Assembler(settle_s=1.0)
    later.feed(LogChunk("stdout.log", 1, (FAILURES[1],), 100.0))
    later.feed(LogChunk("stderr.log", 1, (death(-6),), 400.0))
    [[crash]] = later.take(410.0)
    assert crash.context == ()


# Ascend: torch_npu's exception line, then PTA's and CANN's lines under it (no Python frames).
NPU_LINES = ["RuntimeError: arange_out_op_api:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:36 NPU function error: call aclnnArange failed, error code is 561103",
             "[ERROR] 2026-01-01-10:00:00 (PID:5625, Device:0, RankID:-1) ERR00100 PTA call acl api failed.",
             "EZ9999: Inner Error!",
             "EZ9999: [PID: 5625] 2026-01-01-10:00:00.166.059 Parse dynamic kernel config fail.",
             "        TraceBack (most recent call last):",
             "       AclOpKernelInit failed opType",
             "       ArangeAiCore ADD_TO_LAUNCHER_LIST_AICORE failed."]


def test_the_npu_lines_under_an_ascend_exception_line_are_its_message():
    [[crash]] = assemble_lines(["启动报错：", *NPU_LINES, "", "What should I do?"])
    assert crash.exception == "RuntimeError"
    assert crash.message.splitlines() == [NPU_LINES[0].split(": ", 1)[1], *NPU_LINES[1:]]
    [diagnosis] = diagnose_lines(["启动报错：", *NPU_LINES], "<paste>", RULES, None)
    assert diagnosis.match.category == "kernel-compile-error"


def test_a_bare_exception_line_takes_no_prose_after_it():
    [[crash]] = assemble_lines(["ValueError: page_size must be a power of 2, got 48", "I launched it with --page-size 48.",
                                "EZ9999 is not here"])
    assert crash.message == "page_size must be a power of 2, got 48"


def test_a_crash_announced_with_its_error_inline_is_assembled():
    line = ("[2026-05-01 10:00:00 TP0] Scheduler hit an exception: torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details)")
    [[crash]] = assemble_lines([SERVING, line])
    assert (crash.exception, crash.prefix, crash.rank) == ("torch.distributed.DistBackendError", "Scheduler hit an exception", "TP0")
    [diagnosis] = diagnose_lines([SERVING, line], "<log>", RULES, None)
    assert diagnosis.match.category == "nccl-error"
    assert diagnosis.evidence.phase == "serving"


def trapped(*before: str) -> list[str]:
    return [SERVING, *before,
            "[2026-01-01 10:05:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/moe/token_dispatcher/deepep.py", line 300, in dispatch',
            "    return self._dispatch_core(hidden_states)",
            '  File "/usr/local/lib/python3.12/dist-packages/deep_ep/buffer.py", line 400, in internode_dispatch',
            "    recv_x = self.runtime.internode_dispatch(x)",
            "torch.AcceleratorError: CUDA error: unspecified launch failure",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."]


@pytest.mark.parametrize("line", [
    "DeepEP timeout for dispatch receivers, rank 3, responsible_channel = 5, tokens remained: 12",
    "DeepEP dispatch RDMA sender timeout, channel: 3, RDMA: 1, nvl: 2, dst RDMA lane: 0, head: 10, tail: 12",
    "DeepEP timeout check failed: rank = 6, thread = 0, value = 0)",
])
def test_a_kernel_trap_after_a_deepep_device_timeout_is_a_communication_failure(line):
    [diagnosis] = diagnose_lines(trapped(line), "<log>", RULES, None)
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("nccl-error", "transport-timeout-then-kernel-trap")


def test_the_same_trap_without_a_timeout_before_it_stays_a_device_fault():
    assert diagnose_lines(trapped(), "<log>", RULES, None)[0].match.category == "illegal-memory-access"
    old = trapped("DeepEP timeout for dispatch receivers, rank 3, responsible_channel = 5, tokens remained: 12",
                  *[DECODE] * 250)
    assert diagnose_lines(old, "<log>", RULES, None)[0].match.category == "illegal-memory-access"


def test_a_bare_exception_keeps_the_source_location_its_cpp_check_printed_under_it():
    [[crash]] = assemble_lines(["RuntimeError: invalid argument", "/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350",
                                "then the server exited"])
    assert crash.message == "invalid argument\n/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350"
