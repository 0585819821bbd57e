"""Independent kinds of evidence about one crash, each kept so a diagnosis can say what decided it.

- phase: what the service was doing, from the last start-up milestone before the crash (weight
  load, KV-pool allocation, CUDA-graph capture, warm-up, serving);
- frame families: what kind of code is on the stack (graph capture or replay, memory pool,
  model loader, distributed, kernel JIT, server-args checks, warm-up request);
- exception-type families (out-of-memory, communication, import, connection, compiler …);
- message families: every phrasing of one failure (a shape mismatch, an OOM, a communication
  failure through NCCL, gloo, the c10d store, DeepEP or NVSHMEM, a kernel build failure …);
- the line itself, for failures printed outside a Python traceback (an ERROR line, a fatal
  signal dump, a watchdog line).

Rules match families and phase by name (`[rule.match] message_family = "oom"`); the engine ranks
matching rules and scores its confidence by how many independent kinds agree with the winner.
All patterns here run in RE2 (linear time), like the rules' own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..records import Crash
from .regex import build_reverse, compile_rule_pattern

MILESTONE_MARK = "last milestone: "

# (pattern over the milestone line, phase). The phase a crash is in: after the last milestone.
_PHASES = (
    (r"fired up and ready to roll", "serving"),
    (r"max_total_num_tokens=", "warm-up"),
    (r"Capture [\w ]*?graph end", "warm-up"),
    (r"Capture [\w ]*?graph begin", "graph-capture"),
    (r"KV Cache is allocated|Memory pool end", "kv-pool"),
    (r"Load weight end", "kv-pool"),
    (r"Load weight begin", "weight-load"),
    (r"Init torch distributed begin", "distributed-init"),
)
PHASES = ("distributed-init", "weight-load", "kv-pool", "graph-capture", "warm-up", "serving")
_GRAPH_KIND = re.compile(r"Capture (?:target |draft )?(?P<which>prefill|decode|verify|draft|extend)?[\w ]*?graph",
                         re.IGNORECASE)
_PER_REQ = re.compile(r"num_tokens_per_req=(?P<n>\d+)")

FRAME_FAMILIES: dict[str, str] = {
    "graph-capture": r"graph_runner[^:]*\.py:(?:capture\w*|__init__|_capture\w*|warmup\w*)$|cuda_graph_setup\.py:"
                     r"|torch/cuda/graphs\.py:(?:capture\w*|__enter__|__exit__)$|:init_cuda_graphs$"
                     r"|:capture_one_batch_size$|:(?:capture|_capture_graph|capture_decode_graph)$"
                     r"|piecewise_cuda_graph|cuda_graph_buffer_registry\.py:"
                     # SGLang 0.5.1x's graph backends (model_executor/runner_backend/: full, breakable,
                     # torch.compile piecewise), which capture and replay for every graph runner
                     r"|runner_backend/\w+\.py:capture\w*$",
    "graph-replay": r"graph_runner[^:]*\.py:replay\w*$|torch/cuda/graphs\.py:replay$"
                    r"|runner_backend/\w+\.py:replay\w*$",
    "memory-pool": r"mem_cache/|memory_pool|kv_cache_configurator|:alloc_memory_pool$|:init_memory_pool$"
                   r"|:profile_max_num_token$|:init_memory_pools?$",
    "model-loader": r"model_loader/|:load_weights?$|weight_utils|:load_model$|safetensors|:from_pretrained$"
                    # the layers' own weight loaders, which copy each checkpoint tensor into its shard
                    # (linear and vocab `weight_loader`/`weight_loader_v2`, the fused MoE's `_load_w13` …)
                    r"|:_?weight_loader\w*$|/moe/[\w/]*layer\.py:_load_\w+$",
    "distributed": r"torch/distributed/|parallel_state\.py:|custom_all_reduce|pynccl|deep_ep|deepep|nvshmem"
                   r"|communicator|:init_distributed_environment$|:initialize_model_parallel$|c10d"
                   # SGLang's own distributed package, and the model runner's process-group set-up
                   r"|sglang/srt/distributed/|model_runner\.py:init_torch_distributed$",
    "kernel-jit": r"^triton/|/triton/|torch/_inductor/|torch/_dynamo/|tvm_ffi|flashinfer/jit|sgl_kernel/"
                  r"|jit_kernel|cpp_extension\.py:|:_jit_compile$|ptxas",
    "server-args": r"server_args\.py:|sglang/srt/arg_groups/",
    # Reading the checkpoint's config.json, tokenizer or processor (SGLang's configs/ and its
    # transformers helpers, transformers' own from_pretrained paths).
    "model-config": r"sglang/srt/configs/|sglang/srt/(?:utils/)?hf_transformers_utils\.py:|sglang/srt/utils/hf_transformers/"
                    r"|transformers/models/auto/\w+_auto\.py:from_pretrained$|transformers/(?:configuration_utils"
                    r"|tokenization_utils_base|processing_utils|image_processing_base)\.py:\w*(?:from_pretrained|get_config_dict|dict_from_json_file)"
                    # transformers reading a processor's own config file (image, video, feature extractor)
                    r"|transformers/\w+_utils?\.py:get_\w*(?:processor|extractor)_dict$|transformers/image_processing_base\.py:",
    "warm-up": r"http_server\.py:_wait_and_warmup$|:_execute_server_warmup$",
    "scheduler": r"managers/scheduler\.py:",
    "import": r"$^",  # set from the innermost frames (gather): a module-level import failed
}

EXCEPTION_FAMILIES: dict[str, tuple[str, ...]] = {
    "oom": ("OutOfMemoryError",),
    "comm": ("DistBackendError", "DistNetworkError", "DistError", "DistStoreError", "NCCLError",
             "NcclError", "GlooError", "RendezvousTimeoutError", "RendezvousError", "RendezvousClosedError",
             "HcclError", "KVTransferError", "RendezvousStateError", "RendezvousConnectionError",
             "EtcdRendezvousRetryableFailure", "EtcdRendezvousRetryImmediately"),
    "import": ("ImportError", "ModuleNotFoundError"),
    "connection": ("ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "MaxRetryError",
                   "NewConnectionError", "ReadTimeout", "ConnectTimeout", "RemoteDisconnected",
                   "ClientConnectorError", "ServerDisconnectedError"),
    "compiler": ("CompilationError", "BackendCompilerFailed", "InductorError", "OutOfResources",
                 "CalledProcessError", "PTXASError"),
    "torch-compile": ("BackendCompilerFailed", "InternalTorchDynamoError", "TorchRuntimeError", "Unsupported",
                      "InductorError"),
    "accelerator": ("AcceleratorError", "CudaError", "CUDAError", "HIPError"),
    "config": ("ValueError", "AssertionError", "NotImplementedError"),
    "zmq": ("ZMQError",),
}

MESSAGE_FAMILIES: dict[str, str] = {
    "shape-mismatch": (
        r"size of tensor a \(\d+\) must match the size of tensor b|expanded size of the tensor \(\d+\) must "
        r"match the existing size|[Ss]hape mismatch|shapes? cannot be multiplied|Expected size \d+ but got size"
        r"|CHECK_(?:EQ|NE|LE|LT|GE|GT)\(|is invalid for input of size|could not be broadcast|cannot broadcast"
        r"|broadcast shape|Sizes of tensors must match|[Ss]ize mismatch|holds \d+ rows but caller needs \d+"
        r"|buffer (?:is )?too small|Tensor match failed|Expected (?:tensor|input|all tensors) .{0,80}(?:size|shape)"
        r"|must have the same shape|does not match the (?:shape|size)|incompatible shapes?|shape \[[^\]]*\] .{0,20}"
        r"(?:does not match|!=)|mismatch(?:ed)? (?:in )?(?:shape|size|dimension)"
        # FlashInfer's wrappers: `q.shape[0] (8126) does not match qo_indptr[-1] (8125)`
        r"|\.shape\[-?\d+\] \(\d+\) (?:does not match|!=)"),
    "oom": (r"(?i:out of memory)|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
            r"|hipErrorOutOfMemory|Tried to allocate \d|(?i:insufficient (?:gpu )?memory)|CUDA_ERROR_OUT_OF_MEMORY"
            r"|[Ff]ailed to allocate (?:device |GPU |CUDA )?memory|cudaMalloc(?:Async)? (?:failed|error)|AlignedAllocator"
            r"|\bOOM(?:s|ed)?\b(?:[^ ]| [^k]|$)"
            # the driver API's result code 2 (CUDA_ERROR_OUT_OF_MEMORY), as torch_memory_saver prints it
            r"|CUresult error\s+result=2\b"),
    "kv-pool": (r"KV cache pool|no GPU memory for the KV cache|increase --mem-fraction-static|token_to_kv_pool"
                r"|(?:Prefill|Decode) out of memory|max_total_num_tokens|KV cache is full|not enough (?:space|memory)"
                r" for (?:the )?KV"),
    "comm-failure": (
        r"NCCL|nccl\w*Error|\bnccl[A-Z]\w+|[Gg]loo|c10d|TCPStore|DistNetworkError|DistBackendError"
        r"|ProcessGroup|DeepEP|deep_ep|NVSHMEM|nvshmem|Watchdog caught collective|[Hh]eartbeat monitor"
        r"|collective operation|all_?reduce|all_?gather|broadcast (?:failed|timed out)|mooncake|RDMA|ibv_"
        r"|[Ss]ocket (?:timeout|error)|Connection reset by peer|Broken pipe|store_based_barrier"
        r"|waiting for clients|clients joined|[Ff]ailed to recv|[Rr]endezvous|(?:MASTER_ADDR|MASTER_PORT) expected|\b[HR]CCL\b|\bhccl|NIXL|\bnixl|\bUCX\b"
        r"|(?i:socket (?:timeout|has timed out|closed))|store->get|Rendezvous\w*Error"
        r"|NET/(?:IB|Socket) ?:|socketStartConnect|/dev/shm/nccl-|Bootstrap ?: no socket interface|Duplicate GPU detected"),
    "kernel-build": (
        r"ptxas|nvcc|ninja|CompilationError|[Tt]riton (?:Error|compil)|JIT (?:compil|build)"
        r"|no kernel image is available|invalid device function|hipErrorInvalidDeviceFunction|sgl_kernel"
        r"|Could not run '|undefined symbol|Error building extension|PTX|cubin|[Uu]nsupported (?:GPU |CUDA )?"
        r"(?:arch|architecture|compute capability)|OutOfResources|out of resource|CUDA_HOME|nvrtc|NVRTC"
        r"|named symbol not found|Command '\['[^']*(?:gcc|g\+\+|cc|nvcc|ninja|c\+\+)'"
        r"|hipErrorNoBinaryForGpu|Unable to find code object for all current devices"),
    # `device-side assert triggered`, never the "Compile with `TORCH_USE_CUDA_DSA` to enable
    # device-side assertions." hint torch appends to every CUDA/HIP error it reports.
    "illegal-memory": (
        r"illegal memory access|misaligned address|illegal instruction|Memory access fault by GPU"
        r"|device-side assert(?:ion)? (?:triggered|failed)|unspecified launch failure|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"
        r"|HSA_STATUS_ERROR_EXCEPTION|page fault|cudaErrorIllegal\w+|(?:IndexKernel|Indexing|ScatterGatherKernel)\.cu"
        r"|cudaErrorLaunchFailure|CUDA_ERROR_ILLEGAL_ADDRESS|CUDA_ERROR_LAUNCH_FAILED"
        r"|(?i:out of bounds? tensor access)|index out of bounds"
        r"|hardware stack error|an illegal address was encountered|invalid program counter|cudaErrorInvalidPc"
        r"|CUDA_ERROR_(?:ILLEGAL_INSTRUCTION|MISALIGNED_ADDRESS|HARDWARE_STACK_ERROR)|hipErrorIllegalAddress"
        r"|Out Of Range Address|MMU Fault"),
    # A transport that gave up waiting inside a GPU kernel: DeepEP's and NVSHMEM's device-side
    # timeouts print a line, then trap() the kernel (CUDA then says "unspecified launch failure").
    "transport-timeout": (r"DeepEP\b[^\n]{0,80}\btime(?:d )?out|(?i:nvshmem)\w*\b[^\n]{0,80}\btime(?:d )?out"),
    "missing-module": (r"No module named|cannot import name|ModuleNotFoundError|is not installed|No package metadata was found"
                       r"|is installed with version \S+, which is less than the minimum required"
                       r"|(?:minimum|min) required version"
                       r"|PackageNotFoundError|distribution was not found and is required"
                       r"|[Pp]lease install \w|requires the \w+ (?:package|library)|\bpip3? install ['\"`]?[\w\[-]"
                       r"|(?:package|library|module) [`'\"]?[\w.-]+[`'\"]? is required"
                       r"|[`'\"]?[\w.-]+[`'\"]? (?:package|library|module) is required"),
    "port-in-use": r"[Aa]ddress (?:already )?in use|Errno 98|errno: 98|EADDRINUSE|[Pp]ort \d+ is (?:already )?(?:in use|occupied)"
                   r"|attempting to bind on address|Only one usage of each socket address|WinError 10048",
    "fatal-signal": r"Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|SIGILL|SIGFPE|Fatal Python error|core dumped"
                    r"|double free or corruption|free\(\): invalid|malloc\(\): |corrupted size vs\. prev_size"
                    r"|[Cc]aught signal \d+|signal 11\b|Bus error",
    "gpu-hardware": r"\bXid\b|[Uu]ncorrectable ECC|ECC error|fallen off the bus|cudaErrorECCUncorrectable"
                    r"|GPU is lost|uncorrectable (?:NVLink|memory) error|row remapping failure",
    "no-gpu": r"no CUDA-capable device|No (?:CUDA|HIP|ROCm) GPUs are available|busy or unavailable|cudaErrorNoDevice|NVIDIA driver|CUDA driver (?:initialization|version)|NVML|NVIDIA-SMI has failed"
              r"|invalid device ordinal|No accelerator|Torch not compiled with CUDA|system not yet initialized",
    "timeout": r"(?i:timed out|timeout)",
    "config": (r"requires (?:setting )?--[\w-]+|(?:must|should) be (?:set|used|enabled) (?:with|when|together with) --"
               r"|(?:is )?not supported (?:for|with|when|on|in|by) |does not support |[Oo]nly .{0,80} (?:is|are) supported"
               r"|cannot be used (?:with|together)|is not compatible with|[Uu]nsupported (?:combination|option|value)"
               r"|invalid choice|unrecognized arguments"),
    "connection": r"Connection refused|Max retries exceeded|Failed to establish a new connection"
                  r"|RemoteDisconnected|Cannot connect to host",
    "graph-capture": r"Capture [\w ]*graph failed|[Cc]apturing|graph capture|cudaErrorStreamCapture\w*|piecewise"
                     r"|disable (?:CUDA|cuda) graph by --disable-cuda-graph|set --cuda-graph-max-bs to a smaller value"
                     r"|[Pp]iecewise[ _]cuda[ _]graph|captures_underway"
                     r"|operation not permitted when stream is capturing|stream is capturing",
}

# Which categories each family speaks for: the engine counts agreeing kinds of evidence.
FAMILY_CATEGORIES: dict[str, tuple[str, ...]] = {
    "phase:graph-capture": ("cuda-graph-capture-failed", "cuda-graph-shape-mismatch", "cuda-oom"),
    "phase:kv-pool": ("kv-pool-too-small", "cuda-oom"),
    "phase:weight-load": ("model-load-error", "cuda-oom"),
    "phase:distributed-init": ("nccl-error", "no-gpu"),
    "phase:serving": ("cuda-graph-shape-mismatch", "illegal-memory-access", "cuda-oom", "kv-pool-too-small",
                      "nccl-error", "scheduler-watchdog-timeout", "kv-cache-leak", "other"),
    "frames:graph-capture": ("cuda-graph-capture-failed", "cuda-graph-shape-mismatch", "cuda-oom"),
    "frames:graph-replay": ("cuda-graph-shape-mismatch", "illegal-memory-access"),
    "frames:memory-pool": ("kv-pool-too-small", "cuda-oom", "kv-cache-leak"),
    "frames:model-loader": ("model-load-error", "cuda-oom"),
    "frames:distributed": ("nccl-error",),
    "frames:kernel-jit": ("kernel-compile-error",),
    "frames:server-args": ("unsupported-config",),
    "frames:model-config": ("model-load-error",),
    "frames:import": ("missing-dependency", "kernel-compile-error"),
    "exception:oom": ("cuda-oom", "kv-pool-too-small"),
    "exception:comm": ("nccl-error",),
    "exception:import": ("missing-dependency", "kernel-compile-error"),
    "exception:compiler": ("kernel-compile-error", "cuda-graph-capture-failed"),
    "exception:torch-compile": ("cuda-graph-capture-failed", "kernel-compile-error"),
    "message:shape-mismatch": ("cuda-graph-shape-mismatch", "other"),
    "message:oom": ("cuda-oom", "kv-pool-too-small"),
    "message:kv-pool": ("kv-pool-too-small",),
    "message:comm-failure": ("nccl-error",),
    "message:transport-timeout": ("nccl-error",),
    "message:kernel-build": ("kernel-compile-error",),
    "message:illegal-memory": ("illegal-memory-access",),
    "message:missing-module": ("missing-dependency",),
    "message:port-in-use": ("port-in-use",),
    "message:fatal-signal": ("fatal-signal",),
    "message:gpu-hardware": ("gpu-hardware-fault",),
    "message:no-gpu": ("no-gpu",),
    "message:timeout": ("scheduler-watchdog-timeout", "nccl-error"),
    "message:config": ("unsupported-config",),
    "message:graph-capture": ("cuda-graph-capture-failed",),
}

_FRAME_PATTERNS = {name: compile_rule_pattern(pattern) for name, pattern in FRAME_FAMILIES.items()}
_MESSAGE_PATTERNS = {name: compile_rule_pattern(pattern) for name, pattern in MESSAGE_FAMILIES.items()}
_PHASE_PATTERNS = tuple((re.compile(pattern), phase) for pattern, phase in _PHASES)
_EXCEPTION_INDEX: dict[str, set[str]] = {}
for _family, _names in EXCEPTION_FAMILIES.items():
    for _name in _names:
        _EXCEPTION_INDEX.setdefault(_name, set()).add(_family)
# Families a bare death takes from the lines it printed before it died (rules may match them).
DEATH_LINE_FAMILIES = frozenset({"comm-failure"})
# Deaths those lines never explain: SIGKILL (-9, 137; most often the OOM killer, after which the
# other ranks' transports fail *because* it died) and the fatal signals of a native crash.
UNEXPLAINED_EXITS = frozenset({-9, 137, -11, 139, -7, 135, -4, 132, -8, 136})
# The errors a GPU kernel's trap() surfaces as: after a transport's device-side timeout line they are
# its consequence, not a bad memory access of their own.
_TRAPPED = re.compile(r"unspecified launch failure|an illegal instruction was encountered|cudaErrorLaunchFailure"
                      r"|CUDA_ERROR_LAUNCH_FAILED")
MESSAGE_SCAN_CHARS = 16_384  # families need the gist, not a 64 KB dump


def build_reverse_programs() -> int:
    """Build the reverse programs of the frame and message family patterns now (`regex.build_reverse`):
    every crash's frames and messages are searched with all of them, and RE2 otherwise builds a
    family's reverse program at its first match, on the crash path. Returns how many were built
    (0 without RE2); building one twice costs nothing."""
    return sum(build_reverse(pattern) for pattern in (*_FRAME_PATTERNS.values(), *_MESSAGE_PATTERNS.values()))


@dataclass(frozen=True)
class Evidence:
    kind: str  # "phase" | "frames" | "exception" | "message" | "line"
    family: str
    detail: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "family": self.family, "detail": self.detail}


@dataclass(frozen=True)
class CrashEvidence:
    phase: str | None
    phase_line: str | None
    graph: str | None  # which graph was being captured: prefill, decode, verify, draft
    tokens_per_request: int | None  # the width the graph being captured was sized for
    frame_families: frozenset[str]
    exception_families: frozenset[str]
    message_families: frozenset[str]
    items: tuple[Evidence, ...]

    def families(self, kind: str) -> frozenset[str]:
        return {"frames": self.frame_families, "exception": self.exception_families,
                "message": self.message_families,
                "phase": frozenset({self.phase}) if self.phase else frozenset()}[kind]

    def support(self, category: str) -> list[Evidence]:
        """The evidence items that speak for `category`."""
        return [item for item in self.items
                if category in FAMILY_CATEGORIES.get(
                    f"{'message' if item.kind == 'line' else item.kind}:{item.family}", ())]

    def variables(self) -> dict:
        """Names for templates and `when`: the capture phase facts."""
        values: dict = {}
        if self.phase:
            values["phase"] = self.phase
        if self.graph:
            values["captured_graph"] = self.graph
        if self.tokens_per_request is not None:
            values["graph_tokens_per_req"] = self.tokens_per_request
        return values


def phase_of(context: Iterable[str]) -> tuple[str | None, str | None]:
    line = next((c[len(MILESTONE_MARK):] for c in reversed(tuple(context)) if c.startswith(MILESTONE_MARK)),
                None)
    if line is None:
        return None, None
    for pattern, phase in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase, line
    return None, line


def gather(crash: Crash, errors, frames: Iterable[str]) -> CrashEvidence:
    """The evidence in one crash; `errors` are the chain's (exception, short, message) texts."""
    items: list[Evidence] = []
    phase, phase_line = phase_of(crash.context)
    graph = per_req = None
    if phase_line:
        if phase == "graph-capture":
            kind = _GRAPH_KIND.search(phase_line)
            graph = (kind.group("which") or "decode").lower() if kind else None
            width = _PER_REQ.search(phase_line)
            per_req = int(width.group("n")) if width else None
        if phase:
            items.append(Evidence("phase", phase, phase_line[:200]))
    frame_families: set[str] = set()
    innermost = [f"{f.module}:{f.function}" for f in crash.frames[-3:]]
    module_level = [i for i, frame in enumerate(innermost) if frame.endswith(":<module>")]
    # A module-level frame that is the outermost frame of the stack, in a file outside any
    # installed package, is the entry script itself (a client's main program), not a module
    # some import reached.
    imported = bool(module_level) and (len(crash.frames) - len(innermost) + module_level[-1] > 0
                                       or not innermost[module_level[-1]].startswith("/"))
    if imported and not any(frame.startswith("sglang/") for frame in innermost[module_level[-1] + 1:]):
        # It failed while a module was being imported (in the import itself or in the
        # dependency code the import ran), not in a function the entry point called.
        frame_families.add("import")
        items.append(Evidence("frames", "import", innermost[module_level[-1]]))
    for frame in reversed(tuple(frames)):
        for name, pattern in _FRAME_PATTERNS.items():
            if name not in frame_families and pattern.search(frame):
                frame_families.add(name)
                items.append(Evidence("frames", name, frame))
    exception_families: set[str] = set()
    message_families: set[str] = set()
    texts = []
    for error in errors:
        for family in sorted(_EXCEPTION_INDEX.get(error.short or "", ())):
            if family not in exception_families:
                exception_families.add(family)
                items.append(Evidence("exception", family, error.exception or ""))
        texts.append(f"{error.exception or ''}: {error.message[:MESSAGE_SCAN_CHARS]}")
    if crash.device_asserts:
        # The per-thread `Assertion … failed` lines printed with it: a kernel's bounds check.
        message_families.add("illegal-memory")
        items.append(Evidence("message", "illegal-memory", f"{crash.device_asserts} device-side assertion line(s)"))
    if crash.kind in ("error-line", "nccl-watchdog", "child-death", "watchdog-timeout"):
        items.append(Evidence("line", crash.prefix or crash.kind, crash.message[:200]))
    for line in crash.context:
        # Warnings and error lines printed before the crash (an assertion inside a warning …):
        # evidence that supports a category, never a family a rule matches on by itself.
        if line.startswith(MILESTONE_MARK):
            continue
        for name, pattern in _MESSAGE_PATTERNS.items():
            found = pattern.search(line[:2000])
            if found and name not in ("timeout", "connection"):
                items.append(Evidence("line", name, _around(line, found.start(), found.end())))
                if (name in DEATH_LINE_FAMILIES and crash.kind in ("child-death", "killed")
                        and crash.exit_code not in UNEXPLAINED_EXITS):
                    # A process that died without a word of its own: the transport's WARN lines
                    # it printed just before (NCCL, the c10d store) are all it said.
                    message_families.add(name)
                break
    if crash.kind == "traceback" and crash.context and _TRAPPED.search(crash.message[:2000]):
        timeout = _MESSAGE_PATTERNS["transport-timeout"]
        line = next((line for line in crash.context if timeout.search(line[:2000])), None)
        if line is not None:
            message_families.add("transport-timeout")
            items.append(Evidence("line", "transport-timeout", line[:200]))
    for text in texts:
        for name, pattern in _MESSAGE_PATTERNS.items():
            if name in message_families:
                continue
            found = pattern.search(text)
            if found:
                message_families.add(name)
                items.append(Evidence("message", name, _around(text, found.start(), found.end())))
    return CrashEvidence(phase=phase, phase_line=phase_line, graph=graph, tokens_per_request=per_req,
                         frame_families=frozenset(frame_families),
                         exception_families=frozenset(exception_families),
                         message_families=frozenset(message_families), items=tuple(items))


def _around(text: str, start: int, end: int) -> str:
    left = max(0, start - 40)
    return ("…" if left else "") + text[left:min(len(text), end + 60)].replace("\n", " ")
