"""Crash text as people paste it into issues: lost indentation, newest-line-first order, elided
frames, `line398`, an exception line with its frames trimmed, crashes with no Python traceback,
and a later echo that must not outvote the first cause. Diagnosed the way `ddtreed diagnose` does."""

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules

RULES = load_rules([shipped("rules")])
SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"


def diagnose(text: str):
    return diagnose_lines(text.strip("\n").splitlines(), "<paste>", RULES, None)


def only(text: str):
    diagnoses = diagnose(text)
    assert diagnoses, "no crash assembled"
    return diagnoses[0]


FOUNDING_TAIL = f"""
  File "{SITE}/model_executor/cuda_graph_runner.py", line 1306, in replay
    self.replay_prepare(forward_batch, pp_proxy_tensors)
  File "{SITE}/model_executor/cuda_graph_runner.py", line 1241, in replay_prepare
    self.input_ids[: self.raw_num_token].copy_(forward_batch.input_ids)
RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0
"""


def test_lost_indentation_still_gives_frames_and_exception():
    text = "Traceback (most recent call last):\n" + "\n".join(
        line.strip() for line in FOUNDING_TAIL.strip().splitlines())
    diagnosis = only(text)
    assert diagnosis.crash.exception == "RuntimeError"
    assert [f.function for f in diagnosis.crash.frames] == ["replay", "replay_prepare"]
    assert diagnosis.match.category == "cuda-graph-shape-mismatch"


def test_newest_line_first_paste_is_put_back_in_order():
    lines = ("Traceback (most recent call last):\n" + FOUNDING_TAIL.strip()).splitlines()
    diagnosis = only("\n".join(reversed(lines)))
    assert diagnosis.crash.exception == "RuntimeError"
    assert diagnosis.crash.frames[-1].function == "replay_prepare"
    assert diagnosis.match.category == "cuda-graph-shape-mismatch"


@pytest.mark.parametrize("elision", ["...", "[... 12 lines omitted ...]", "<truncated>", "…"])
def test_elided_frames_are_skipped(elision):
    text = ("Traceback (most recent call last):\n"
            f'  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process\n'
            "    scheduler.event_loop_normal()\n" f"{elision}\n" + FOUNDING_TAIL)
    diagnosis = only(text)
    assert diagnosis.crash.exception == "RuntimeError"
    assert diagnosis.crash.frames[-1].function == "replay_prepare"
    assert diagnosis.match.category == "cuda-graph-shape-mismatch"


def test_line_number_without_a_space():
    text = FOUNDING_TAIL.replace("line 1241", "line1241").replace("line 1306", "line1306")
    diagnosis = only("Traceback (most recent call last):\n" + text)
    assert [f.line for f in diagnosis.crash.frames] == [1306, 1241]


def test_exception_line_with_trimmed_frames_is_still_a_crash():
    diagnosis = only("Traceback (most recent call last):\n  ...\n"
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert diagnosis.crash.exception == "torch.OutOfMemoryError"
    assert diagnosis.match.category == "cuda-oom"


@pytest.mark.parametrize("line, category", [
    (("Memory access fault by GPU node-2 (Agent handle: 0x55d0c9a3e2f0) on address 0x7f2c5a000000. "
      "Reason: Page not present or supervisor privilege."), "illegal-memory-access"),
    ((":0:rocdevice.cpp            :2984: 7131232542 us: [pid:81 tid:0x7f] Callback: Queue 0x7f aborting "
      "with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
      "beyond the largest legal address. code: 0x29"), "illegal-memory-access"),
    (("[rank0]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
      "Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective "
      "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000) ran for 600046 milliseconds before timing out."), "nccl-error"),
    (("[W1201 10:00:00.000000000 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=45, "
      "addr=[localhost]:50000, remote=[localhost]:29500): failed to recv, got 0 bytes"), "nccl-error"),
    ("Fatal Python error: Segmentation fault", "fatal-signal"),
    ("NVRM: Xid (PCI:0000:18:00): 79, pid=4242, GPU has fallen off the bus.", "gpu-hardware-fault"),
    (("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address "
      "already in use"), "port-in-use"),
    ("[2026-12-01 10:00:00] SWA Pool Mem Leak Detected! full_available_size=100, swa_available_size=90",
     "kv-cache-leak"),
])
def test_crashes_without_a_python_traceback(line, category):
    diagnosis = only(line)
    assert diagnosis.match.category == category, diagnosis.match


def test_a_warm_up_connection_error_does_not_outvote_the_real_crash():
    text = f"""
[2026-12-01 10:00:00] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=20.00 GB
[2026-12-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "{SITE}/mem_cache/memory_pool.py", line 300, in __init__
    self._create_buffers()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.

[2026-12-01 10:00:02] Traceback (most recent call last):
  File "{SITE}/entrypoints/http_server.py", line 1100, in _wait_and_warmup
    res = requests.post(url + request_name, json=json_data, headers=headers, timeout=600)
  File "/usr/local/lib/python3.12/dist-packages/requests/adapters.py", line 700, in send
    raise ConnectionError(e, request=request)
requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded with url: /generate (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))
"""
    diagnoses = diagnose(text)
    assert diagnoses[0].match.category == "cuda-oom"
    assert diagnoses[0].crash.exception == "torch.OutOfMemoryError"
    assert diagnoses[0].phase == "kv-pool"


def test_an_assertion_inside_a_warning_is_kept_as_evidence():
    text = f"""
/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/x.py:10: UserWarning: AssertionError: expected 4 heads per rank
Traceback (most recent call last):
  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process
    scheduler.event_loop_normal()
RuntimeError: something failed
"""
    diagnosis = only(text)
    assert any(item.kind == "line" and "AssertionError" in item.detail or "heads" in item.detail
               for item in diagnosis.evidence.items) or any("AssertionError" in c for c in diagnosis.crash.context)
