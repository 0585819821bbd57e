# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""Communication and device failures, family by family, in the strings their sources print: NCCL's
`ncclGetErrorString` results and `NCCL WARN` lines, torch's ProcessGroupNCCL / NCCLUtils / c10d
store / gloo texts, NVSHMEM and DeepEP, the CUDA runtime's fault strings and the driver's Xid
lines, HIP/ROCm (HSA) faults, SGLang's watchdogs. Each string is put in a text as a user would
meet it (a traceback SGLang's scheduler printed, a log line, a bare pasted line) and must get its
category through `ddtreed diagnose`'s own path. Written from the sources, not from any corpus entry."""

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from phrasing_helpers import traceback_text

RULES = load_rules([shipped("rules")])
BANNER = "[2026-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"


def tb(frames, last, before=""):
    return traceback_text(frames, last, before, banner=BANNER, line=211, body="    step()")


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_overlap",
         "sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/managers/tp_worker.py:forward_batch_generation",
         "sglang/srt/model_executor/model_runner.py:forward"]
INIT = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__",
        "sglang/srt/model_executor/model_runner.py:init_torch_distributed"]
PYNCCL = INIT + ["sglang/srt/distributed/parallel_state.py:initialize_model_parallel", "sglang/srt/distributed/parallel_state.py:init_model_parallel_group",
                 "sglang/srt/distributed/device_communicators/pynccl.py:__init__", "sglang/srt/distributed/device_communicators/pynccl_wrapper.py:NCCL_CHECK"]
ALLREDUCE = SCHED + ["sglang/srt/layers/linear.py:forward", "sglang/srt/distributed/communication_op.py:tensor_model_parallel_all_reduce",
                     "sglang/srt/distributed/parallel_state.py:all_reduce", "torch/distributed/distributed_c10d.py:all_reduce"]
STORE = INIT + ["sglang/srt/distributed/parallel_state.py:init_distributed_environment", "torch/distributed/c10d_logger.py:wrapper",
                "torch/distributed/distributed_c10d.py:init_process_group", "torch/distributed/rendezvous.py:_tcp_rendezvous_handler",
                "torch/distributed/rendezvous.py:_create_c10d_store"]
DEEPEP = SCHED + ["sglang/srt/models/deepseek_v2.py:forward", "sglang/srt/layers/moe/ep_moe/layer.py:forward",
                  "sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch", "deep_ep/buffer.py:internode_dispatch"]
SERVING = "[2026-03-01 09:00:00] The server is fired up and ready to roll!\n"

# NCCL's ncclResult_t strings (ncclGetErrorString), as torch's NCCLUtils and SGLang's pynccl wrap them.
NCCL_RESULTS = [
    ("ncclUnhandledCudaError", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "Call to CUDA function failed."),
    ("ncclSystemError", "unhandled system error (run with NCCL_DEBUG=INFO for details)", "System call (e.g. socket, malloc) or external library call failed or device error. It can be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure reason and see if there is connection closure by a peer."),
    ("ncclInternalError", "internal error - please report this issue to the NCCL developers", "Internal check failed."),
    ("ncclInvalidArgument", "invalid argument (run with NCCL_DEBUG=WARN for details)", "Invalid value for an argument."),
    ("ncclInvalidUsage", "invalid usage (run with NCCL_DEBUG=WARN for details)", "This usually reflects invalid usage of NCCL library."),
    ("ncclRemoteError", "remote process exited or there was a network error", "A call failed possibly due to a network error or a remote process exiting prematurely."),
    ("ncclInProgress", "NCCL operation in progress", "NCCL operation in progress."),
    ("ncclTimeout", "timeout", "Operation timed out."),
]
PHRASINGS = []
for code, text, detail in NCCL_RESULTS:
    PHRASINGS += [
        ("nccl-error", tb(ALLREDUCE, f"torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, {text}, NCCL version 2.27.3\n{code}: {detail}")),
        ("nccl-error", tb(PYNCCL, f"RuntimeError: NCCL error: {text}")),
        ("nccl-error", f"{code}: {detail}"),
    ]

PHRASINGS += [
    # torch's ProcessGroupNCCL watchdog and abort wordings (C++ lines, no Python frames)
    ("nccl-error", SERVING + "[rank2]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:685] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8123, OpType=_ALLGATHER_BASE, NumelIn=4096, NumelOut=32768, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."),
    ("nccl-error", SERVING + "[rank2]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 2] Exception (either an error or timeout) detected by watchdog at work: 8123, last enqueued NCCL work: 8124, last completed NCCL work: 8122."),
    ("nccl-error", SERVING + "[rank2]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:743] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."),
    ("nccl-error", SERVING + "[rank2]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:749] To avoid data inconsistency, we are taking the entire process down."),
    ("nccl-error", "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.27.3\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."),
    ("nccl-error", "[rank0]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from rank 3 and we will try our best to dump the debug info. Last enqueued NCCL work: 51, last completed NCCL work: 50."),
    ("nccl-error", tb(ALLREDUCE, "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.")),
    ("nccl-error", "RuntimeError: NCCL communicator was aborted on rank 3.  Original reason for failure was: [Rank 3] Watchdog caught collective operation timeout"),
    # torch's watchdog rethrows in its thread and the process aborts: the abort is its consequence
    ("nccl-error", "[rank0]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:1797] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error: unhandled cuda error\nFatal Python error: Aborted\n\nThread 0x00007f3a2b7fe640 (most recent call first):\n  <no Python frame>"),
    ("illegal-memory-access", "[rank0]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:1797] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\nFatal Python error: Aborted"),
    # sgl-kernel's custom all-reduce: the CUDA error, then the kernel's source location on the next line
    ("nccl-error", "RuntimeError: invalid argument\n/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350"),
    ("nccl-error", tb(SCHED + ["sglang/srt/distributed/device_communicators/custom_all_reduce.py:all_reduce"], "RuntimeError: invalid device pointer\n/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:271")),
    # NCCL's own WARN lines (pasted without torch's wrapper)
    ("nccl-error", "node-3:4321:4400 [2] transport/net_ib.cc:1200 NCCL WARN NET/IB : Got completion from peer 10.1.0.7<47315> with status=12 opcode=129 len=0 vendor err 129 (Recv) localGid ::ffff:10.1.0.3 remoteGids::ffff:10.1.0.7 hca mlx5_2"),
    ("nccl-error", "node-3:4321:4400 [0] misc/socket.cc:538 NCCL WARN socketStartConnect: Connect to 10.1.0.7<60123> failed : Software caused connection abort"),
    ("nccl-error", "node-3:4321:4321 [0] include/shmutils.h:38 NCCL WARN Error: failed to extend /dev/shm/nccl-MZ4GFz to 9637892 bytes, error: No space left on device (28)"),
    ("nccl-error", "node-3:4321:4450 [1] proxy.cc:1530 NCCL WARN [Proxy Service 1] Failed to execute operation Connect from rank 1, retcode 3"),
    ("nccl-error", "node-3:4321:4321 [0] bootstrap.cc:75 NCCL WARN Bootstrap : no socket interface found"),
    # NCCL's transport messages quoted alone (as a DistBackendError's `Last error:` prints them)
    ("nccl-error", "NET/IB : Got completion from peer 10.1.0.7<47315> with status=12 opcode=129 len=0 vendor err 129 (Recv)"),
    ("nccl-error", "socketProgressOpt: Call to recv from 10.1.0.7<43214> failed : Connection reset by peer"),
    ("nccl-error", "Error: failed to extend /dev/shm/nccl-MZ4GFz to 9637892 bytes, error: No space left on device (28)"),
    ("nccl-error", "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000"),
    ("nccl-error", "ibv_poll_cq error"),
    ("nccl-error", "Net : Connection closed by remote peer 10.1.0.7<43214>"),
    # gloo
    ("nccl-error", tb(ALLREDUCE[:-1] + ["torch/distributed/distributed_c10d.py:broadcast"], "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error [10.1.0.7]:29871: Connection reset by peer")),
    ("nccl-error", tb(ALLREDUCE[:-1] + ["torch/distributed/distributed_c10d.py:broadcast_object_list"], "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete")),
    ("nccl-error", tb(STORE[:-2] + ["torch/distributed/distributed_c10d.py:new_group"], "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.1.0.7]:41271: Connection refused")),
    ("nccl-error", "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"),
    # the c10d store
    ("nccl-error", tb(STORE, "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.")),
    ("nccl-error", tb(STORE, "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to (10.1.0.2, 5000).")),
    ("nccl-error", tb(STORE, "torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (head-node, 5000).")),
    ("nccl-error", tb(ALLREDUCE, "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0")),
    ("nccl-error", tb(ALLREDUCE, "RuntimeError: [c10d] recvValue failed on SocketImpl(fd=52, addr=[node-1]:45678, remote=[head-node]:5000): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")),
    ("nccl-error", "[W301 10:00:00.000000000 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=40, addr=[node-1]:52134, remote=[head-node]:5000): Broken pipe"),
    ("nccl-error", "[E301 10:00:00.000000000 socket.cpp:1019] [c10d] The client socket has timed out after 600000ms while trying to connect to (head-node, 5000)."),
    ("port-in-use", tb(STORE, "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 5000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")),
    ("port-in-use", "[W301 10:00:00.000000000 socket.cpp:752] [c10d] The server socket has failed to bind to [::]:5000 (errno: 98 - Address already in use)."),
    # NVSHMEM and DeepEP
    ("nccl-error", tb(DEEPEP, "RuntimeError: DeepEP error: CPU recv timeout")),
    ("nccl-error", tb(DEEPEP[:-1] + ["deep_ep/buffer.py:dispatch"], "RuntimeError: DeepEP error: timeout (dispatch CPU)")),
    ("nccl-error", "DeepEP timeout for dispatch receivers, rank 3, responsible_channel = 5, tokens remained: 12\nDeepEP timeout for dispatch receivers, rank 3, responsible_channel = 7, tokens remained: 4"),
    ("nccl-error", "DeepEP timeout check failed: rank = 6, thread = 0, value = 0)"),
    ("nccl-error", "DeepEP dispatch RDMA sender timeout, channel: 3, RDMA: 1, nvl: 2, dst RDMA lane: 0, head: 10, tail: 12"),
    ("nccl-error", "/sgl-workspace/nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:282: init failed for transport: IBGDA\n/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization failed, exiting"),
    ("nccl-error", tb(INIT + ["sglang/srt/layers/moe/token_dispatcher/deepep.py:__init__", "deep_ep/buffer.py:__init__"], "RuntimeError: Failed: CUDA error /sgl-workspace/DeepEP/csrc/kernels/runtime.cu:41 'invalid argument' during nvshmem initialization")),
    # SGLang's watchdogs
    ("scheduler-watchdog-timeout", "[2026-03-01 10:20:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
    ("scheduler-watchdog-timeout", "[2026-03-01 10:20:00] TokenizerManager watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
    ("scheduler-watchdog-timeout", "[2026-03-01 10:20:00 DP1 TP0] Watchdog timeout (self.watchdog_timeout=300)"),
    ("scheduler-watchdog-timeout", "[2026-03-01 10:20:00 TP3] Scheduler watchdog timeout (self.watchdog_timeout=600, self.soft=False) tripped_by=forward-counter-frozen(cur_batch set)"),
    # the watchdog's dump before its timeout line (pasted without it): the scheduler's debug info, py-spy's result
    ("scheduler-watchdog-timeout", "The server hung; this is what it printed:\n[2026-03-01 10:20:00 TP1] Scheduler debug info:\nscheduler.cur_batch_for_debug.batch_size()=1\nscheduler.cur_batch_for_debug.reqs=[Req(rid=9f2c, input_ids=[1, 2, 3])]"),
    ("scheduler-watchdog-timeout", "The server hung; this is what it printed:\n[2026-03-01 10:20:00 TP0] self.cur_batch.batch_size()=4, self.cur_batch.reqs=[Req(rid=1), Req(rid=2)]"),
    ("scheduler-watchdog-timeout", "The server hung; this is what it printed:\n[2026-03-01 10:20:00] Pyspy failed (py-spy: command not found) for PID 4242"),
    ("scheduler-watchdog-timeout", "The server stops answering after an hour:\n[2026-03-01 10:20:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 10:19:40. last_heartbeat time: 10:12:01"),
    ("scheduler-watchdog-timeout", "kubectl logs shows:\n2026-09-08T04:05:00.000000000Z stderr F [2026-09-08 04:05:00] ERROR: Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 04:04:40. last_heartbeat time: 04:00:01"),
    # ... but a cause printed beside it decides
    ("nccl-error", "DeepEP timeout check failed: rank = 6, thread = 0, value = 1024\nHealth check failed. Server couldn't get a response from detokenizer for last 20 seconds."),
    # the CUDA runtime's fault strings (cudaGetErrorString), as torch raises them
    ("illegal-memory-access", tb(SCHED, "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1")),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA error: misaligned address\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA error: an illegal instruction was encountered")),
    ("illegal-memory-access", tb(SCHED, "torch.AcceleratorError: CUDA error: unspecified launch failure")),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA error: device-side assert triggered")),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA error: hardware stack error")),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA error: an illegal address was encountered")),
    ("illegal-memory-access", "[rank0]:[E301 10:10:00.000000000 ProcessGroupNCCL.cpp:1797] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: CUDA driver error: an illegal memory access was encountered")),
    ("gpu-hardware-fault", tb(SCHED, "torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered")),
    ("gpu-hardware-fault", tb(SCHED, "RuntimeError: CUDA error: uncorrectable NVLink error was detected during the execution")),
    ("gpu-hardware-fault", tb(SCHED, "RuntimeError: CUDA error: GPU is lost")),
    ("no-gpu", tb(INIT, "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable")),
    ("no-gpu", tb(INIT, "RuntimeError: CUDA error: no CUDA-capable device is detected")),
    ("no-gpu", tb(INIT, "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination")),
    ("no-gpu", tb(INIT, "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!")),
    ("kernel-compile-error", tb(SCHED, "RuntimeError: CUDA error: no kernel image is available for execution on the device")),
    ("kernel-compile-error", tb(SCHED, "RuntimeError: CUDA error: invalid device function")),
    # the CUDA driver API's result codes as torch_memory_saver prints them: 2 is CUDA_ERROR_OUT_OF_MEMORY
    ("cuda-oom", "The memory saver fails at start-up:\n[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103"),
    # the driver's Xid lines (dmesg / the kernel log pasted into a report)
    ("gpu-hardware-fault", "[Tue Mar  1 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."),
    ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."),
    ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:3b:00): 95, pid=4242, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No"),
    ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:3b:00): 74, pid=4242, name=python3, NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
    ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:3b:00): 64, pid=4242, name=python3, Row Remapper: New row marked for remapping, reset gpu to activate."),
    ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:3b:00): 119, pid=4242, name=python3, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."),
    ("illegal-memory-access", "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
    ("illegal-memory-access", "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
    # HIP / ROCm
    ("illegal-memory-access", "Memory access fault by GPU node-2 (Agent handle: 0x5581f0) on address 0x7f1a2b000000. Reason: Page not present or supervisor privilege."),
    ("illegal-memory-access", ":0:rocdevice.cpp            :2984: 1234567890 us: [pid:4242  tid:0x7f12] Callback: Queue 0x7f1200000000 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address. code: 0x29"),
    ("illegal-memory-access", ":0:rocdevice.cpp            :3020: 1234567890 us: [pid:4242  tid:0x7f12] Callback: Queue 0x7f1200000000 aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016"),
    ("illegal-memory-access", tb(SCHED, "RuntimeError: HIP error: an illegal memory access was encountered\nHIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
    ("kernel-compile-error", tb(SCHED, "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported at some other API call")),
    ("kernel-compile-error", "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"),
    ("no-gpu", tb(INIT, "RuntimeError: No HIP GPUs are available")),
    ("no-gpu", "rocBLAS error: Could not initialize Tensile host: No devices found"),
    # fatal signals printed by the runtime
    ("fatal-signal", "Fatal Python error: Segmentation fault\n\nThread 0x00007f3a2b7fe640 (most recent call first):\n  File \"/usr/lib/python3.12/threading.py\", line 359 in wait"),
    ("fatal-signal", "Fatal Python error: Aborted\n\nCurrent thread 0x00007f3a2c9ff640 (most recent call first):\n  <no Python frame>"),
    ("fatal-signal", "*** SIGSEGV received at time=1767261600 on cpu 12 ***\nPC: @     0x7f3a2b7fe640  (unknown)  ncclProxyService()"),
    ("fatal-signal", "*** Aborted at 1767261600 (unix time) try \"date -d @1767261600\" if you are using GNU date ***\n*** SIGABRT (@0x1092) received by PID 4242 (TID 0x7f3a2b7fe640) from PID 4242; stack trace: ***"),
    # glibc's malloc checks and std::terminate, the shell's padded job report, exit codes of native-crash signals
    ("fatal-signal", "free(): double free detected in tcache 2"),
    ("fatal-signal", "malloc(): unaligned tcache chunk detected\nAborted (core dumped)"),
    ("fatal-signal", "malloc_consolidate(): invalid chunk size"),
    ("fatal-signal", "*** stack smashing detected ***: terminated"),
    ("fatal-signal", "terminate called without an active exception"),
    ("fatal-signal", "run.sh: line 12:  4242 Segmentation fault      (core dumped) python3 -m sglang.launch_server --model-path /models/qwen"),
    ("fatal-signal", "Process SpawnProcess-1:1 exited with exitcode -11"),
    # SGLang's SIGCHLD handler prints the raw wait status: 139 = SIGSEGV with a core dump, 9 = SIGKILL
    ("fatal-signal", "The server log says:\n[2026-03-01 10:00:00] Child process unexpectedly failed with exitcode=139. pid=4242"),
    ("fatal-signal", "Child process unexpectedly failed with an exit code 11. pid=4242"),
    ("other", "After a few hours: Child process unexpectedly failed with exitcode=9. pid=211"),
]

# Close wordings that belong elsewhere: a transport named in a refusal, an OOM inside NCCL's text.
NEAR_MISSES = [
    ("unsupported-config", tb(INIT + ["sglang/srt/server_args.py:__post_init__"], "ValueError: DeepEP MoE is not supported with --enable-two-batch-overlap yet.")),
    ("cuda-oom", tb(ALLREDUCE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.2 GiB is free.")),
    ("port-in-use", "[2026-03-01 10:00:00] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"),
]


def category(text):
    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", RULES, None)
    assert diagnoses, "nothing diagnosed"
    return diagnoses[0].match.category, diagnoses[0].match.rule_id, diagnoses[0].match.diagnosis


@pytest.mark.parametrize("expected,text", PHRASINGS, ids=[f"{c}-{n}" for n, (c, _) in enumerate(PHRASINGS)])
def test_source_phrasing_gets_its_category(expected, text):
    got, rule_id, diagnosis = category(text)
    assert got == expected, (rule_id, diagnosis)


@pytest.mark.parametrize("expected,text", NEAR_MISSES, ids=[f"{c}-{n}" for n, (c, _) in enumerate(NEAR_MISSES)])
def test_near_miss_keeps_its_category(expected, text):
    assert category(text)[0] == expected


# Not a native crash: SIGKILL (the OOM killer, an operator) and SIGABRT's bare exit code (NCCL aborts too).
NOT_FATAL_SIGNAL = ["Process SpawnProcess-1:1 exited with exitcode -9", "exitcode  : -9 (pid: 4242)", "Exit code: -6",
                    "Child process unexpectedly failed with exitcode=256. pid=4242"]


@pytest.mark.parametrize("text", NOT_FATAL_SIGNAL)
def test_a_kill_or_abort_exit_code_alone_is_not_a_fatal_signal(text):
    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", RULES, None)
    assert not diagnoses or diagnoses[0].match.category != "fatal-signal"


def test_a_live_log_with_failed_health_checks_has_no_crash():
    # A busy server (a long prefill) misses SGLang's 20 s health check and recovers: never a reason to restart it.
    log = ["[2026-03-01 09:00:00] The server is fired up and ready to roll!",
           "[2026-03-01 10:20:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 10:19:40. last_heartbeat time: 10:19:30",
           "[2026-03-01 10:20:05 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.02, #running-req: 0, #queue-req: 0,"]
    assert diagnose_lines(log, "<log>", RULES, None) == []
