"""Log mixes a real SGLang 0.5.16 deployment writes, for the throughput benchmarks.

Every line template is taken from the logs of real SGLang 0.5.16 runs on an H200
(/work/shared/real-sglang/logs: basic.log, ngram.log, dflash.log, hog_3.log, ck_scheduler.log),
with rank tags added the way SGLang prints them with --tp-size > 1 (`[date time TP3]`). Mixes:

- `typical`: decode (speculative: accept len/rate) and prefill progress lines of 8 ranks, uvicorn
  access lines, tagged warnings, untagged lines (Python warnings, tqdm progress), a few long lines
  (the 8 KB `server_args=` line and a tqdm carriage-return line), a few tracebacks.
- `noisy`: the same progress lines broken up by device-side-assert floods (4,096 lines each),
  NCCL chatter (`[rank0]:[W… ProcessGroupNCCL.cpp…] Warning`, `NCCL INFO` lines), 5 % long lines.
- `worst`: 30 % of the lines are traceback lines (the real CUDA-OOM scheduler traceback of
  hog_3.log: tagged header, frames with caret lines, the exception line, a blank).

Each file starts the way the real log does (startup milestones of 8 ranks, then `ready to roll`).
`generate(path, mix, lines, seed) -> Written` writes the file; `Written.tracebacks` is how many
rank tracebacks it holds (the pipeline must find them all).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MIXES = ("typical", "noisy", "worst")
SITE = "/tmp/site"


@dataclass
class Written:
    lines: int = 0
    bytes: int = 0
    tracebacks: int = 0
    long_lines: int = 0
    untagged: int = 0


def _stamp(second: int) -> str:
    return f"2026-12-01 {8 + second // 3600 % 12:02d}:{second // 60 % 60:02d}:{second % 60:02d}"


def decode(rng: random.Random, ts: str) -> str:
    return (f"[{ts} TP{rng.randrange(8)}] Decode batch, #running-req: {rng.randrange(1, 64)}, "
            f"#token: {rng.randrange(100, 99999)}, token usage: 0.{rng.randrange(100):02d}, "
            f"accept len: {1 + rng.random() * 4:.2f}, accept rate: 0.{rng.randrange(100):02d}, "
            f"cuda graph: True, gen throughput (token/s): {rng.random() * 4000:.2f}, #queue-req: "
            f"{rng.randrange(4)}")


def prefill(rng: random.Random, ts: str) -> str:
    return (f"[{ts} TP{rng.randrange(8)}] Prefill batch, #new-seq: {rng.randrange(1, 4)}, "
            f"#new-token: {rng.randrange(1, 8192)}, #cached-token: {rng.randrange(0, 512)}, "
            f"token usage: 0.{rng.randrange(100):02d}, #running-req: {rng.randrange(64)}, "
            f"#queue-req: 0, #pending-token: 0, cuda graph: {rng.choice(('True', 'False'))}, "
            f"input throughput (token/s): {rng.random() * 9000:.2f}")


_HTTP = ('"POST /generate HTTP/1.1" 200 OK', '"GET /health HTTP/1.1" 200 OK',
         '"GET /health_generate HTTP/1.1" 200 OK', '"POST /v1/chat/completions HTTP/1.1" 200 OK',
         '"GET /metrics HTTP/1.1" 200 OK', '"GET /model_info HTTP/1.1" 200 OK')


def http(rng: random.Random, ts: str) -> str:
    return f"[{ts}] INFO:     127.0.0.1:{rng.randrange(30000, 65000)} - {rng.choice(_HTTP)}"


_TAGGED_WARNINGS = (
    "Fail to set RLIMIT_NOFILE: current limit exceeds maximum limit",
    "Ignore import error when loading sglang.srt.models.inkling: No module named 'helion'",
    "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed "
    "(ModuleNotFoundError: No module named 'openai_harmony')",
    "Using fallback token IDs for yes/no (9693/2152)",
)


def tagged_warning(rng: random.Random, ts: str) -> str:
    return f"[{ts}] {rng.choice(_TAGGED_WARNINGS)}"


_UNTAGGED = (
    f"{SITE}/fastapi/routing.py:161: FastAPIDeprecationWarning: ORJSONResponse is deprecated, FastAPI "
    "now serializes data directly to JSON bytes via Pydantic when a return type or response model is "
    "set, which is faster and doesn't need a custom response class.",
    "  warnings.warn(",
    "/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: "
    "There appear to be 1 leaked semaphore objects to clean up at shutdown",
    "Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]Multi-thread loading shards: "
    "100% Completed | 1/1 [00:00<00:00, 234.54it/s]",
    f"{SITE}/torchao/quantization/quant_api.py:1731: SyntaxWarning: invalid escape sequence '\\.'",
)


def untagged(rng: random.Random, ts: str) -> str:
    return rng.choice(_UNTAGGED)


def long_tagged(rng: random.Random, ts: str) -> str:
    """The `server_args=ServerArgs(...)` line SGLang logs at start (8–14 KB in the real logs)."""
    fields = ", ".join(f"option_{i}={rng.choice(('None', 'False', 'True', repr('auto'), str(i)))}"
                       for i in range(420))
    return f"[{ts}] server_args=ServerArgs(model_path='/tmp/model', {fields})"


def long_untagged(rng: random.Random, ts: str) -> str:
    """tqdm's carriage-return progress of CUDA-graph capture: one 8 KB untagged line."""
    return "".join(f"Capturing batches (bs={256 - 8 * i} avail_mem=9.{rng.randrange(99):02d} GB):  "
                   f"{i * 3}%|▎         | {i}/36 [00:0{i % 10}<00:00, 38.2it/s]" for i in range(80))


_NCCL = (
    "[rank{r}]:[W1201 07:54:47.401912563 ProcessGroupNCCL.cpp:1575] Warning: WARNING: "
    "destroy_process_group() was not called before program exit, which can leak resources. For more "
    "info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
    "h200-node-3:15978:16021 [{r}] NCCL INFO Channel 0{c}/24 :    0   1   2   3   4   5   6   7",
    "h200-node-3:15978:16021 [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "h200-node-3:15978:16021 [{r}] NCCL INFO comm 0x5581c0a3e2d0 rank {r} nranks 8 cudaDev {r} "
    "nvmlDev {r} busId 1{r}000 commId 0x8a1f3c - Init COMPLETE",
)


def nccl(rng: random.Random, ts: str) -> str:
    return rng.choice(_NCCL).format(r=rng.randrange(8), c=rng.randrange(10))


ASSERT = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], "
          "thread: [{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of "
          "bounds\"` failed.")

# The real scheduler traceback of hog_3.log (CUDA OOM in graph-buffer setup), 3.12 caret lines.
_FRAMES = (
    ("sglang/srt/managers/scheduler.py", 4623, "run_scheduler_process", "scheduler = Scheduler(", 10),
    ("sglang/srt/managers/scheduler.py", 431, "__init__", "self.init_model_worker()", 0),
    ("sglang/srt/managers/scheduler.py", 854, "init_model_worker", "self.init_all_cuda_graphs()", 0),
    ("sglang/srt/managers/scheduler.py", 841, "init_all_cuda_graphs", "self.tp_worker.init_cuda_graphs()", 0),
    ("sglang/srt/managers/tp_worker.py", 396, "init_cuda_graphs", "self.model_runner.init_cuda_graphs(", 0),
    ("sglang/srt/model_executor/model_runner.py", 839, "init_cuda_graphs",
     "capture = capture_cuda_graphs(", 20),
    ("sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", 94, "capture_cuda_graphs",
     "eager_runner = EagerRunner(model_runner)", 25),
    ("sglang/srt/model_executor/runner/eager_runner.py", 117, "__init__",
     "self._eager_registry = build_eager_registry(", 21),
    ("sglang/srt/model_executor/cuda_graph_buffer_registry.py", 930, "build_eager_registry",
     "return build_decode_registry(", 22),
    ("sglang/srt/model_executor/cuda_graph_buffer_registry.py", 706, "build_decode_registry",
     "reg.register_slot(slot, bind=bind)", 0),
    ("sglang/srt/model_executor/cuda_graph_buffer_registry.py", 352, "register_slot",
     "buffer = torch.zeros(shape, dtype=slot.dtype, device=device)", 51),
)


def traceback(rng: random.Random, ts: str) -> list[str]:
    rank = rng.randrange(8)
    lines = [f"[{ts} TP{rank}] Scheduler hit an exception: Traceback (most recent call last):"]
    for path, number, function, code, carets in _FRAMES:
        lines += [f'  File "{SITE}/{path}", line {number}, in {function}', f"    {code}"]
        if carets:
            lines.append("    " + " " * (len(code) - carets) + "^" * carets)
    lines.append(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.randrange(2, 64)}.00 MiB. "
                 f"GPU {rank} has a total capacity of 139.80 GiB of which 26.75 MiB is free. Process 9310 "
                 "has 136.79 GiB memory in use. Including non-PyTorch memory, this process has 2.97 GiB "
                 "memory in use. Of the allocated memory 2.21 GiB is allocated by PyTorch, and 21.39 MiB "
                 "is reserved by PyTorch but unallocated.")
    lines.append("")
    return lines


# (weight, generator) per mix; a generator returns one line. Tracebacks and floods are events.
_WEIGHTS = {
    "typical": ((720, decode), (120, prefill), (120, http), (20, tagged_warning), (18, untagged),
                (1, long_tagged), (1, long_untagged)),
    "noisy": ((600, decode), (100, prefill), (50, http), (150, nccl), (25, long_tagged),
              (25, long_untagged), (50, untagged)),
    "worst": ((560, decode), (100, prefill), (40, http)),
}
TRACEBACK_LINES = len(traceback(random.Random(0), "x"))


# How the real 0.5.16 log begins (ck_scheduler.log, rank tags added): the file starts with it once.
STARTUP = (
    "[{ts} TP{r}] Init torch distributed begin.",
    "[{ts} TP{r}] Init torch distributed ends. elapsed=0.19 s, mem usage=0.09 GB",
    "[{ts} TP{r}] Load weight begin. avail mem=139.13 GB",
    "[{ts} TP{r}] Load weight end. elapsed=0.08 s, type=Qwen3ForCausalLM, avail mem=139.10 GB, mem usage=0.02 GB.",
    "[{ts} TP{r}] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65850615, K size: 62.80 GB, V size: 62.80 GB",
    "[{ts} TP{r}] Memory pool end. avail mem=12.94 GB",
    "[{ts} TP{r}] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 12, 16]",
    "[{ts} TP{r}] Capture target prefill CUDA graph end. elapsed=2.16 s, mem usage=0.17 GB, avail mem=9.72 GB.",
    "[{ts} TP{r}] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8]",
    "[{ts} TP{r}] Capture target decode CUDA graph end. elapsed=1.27 s, mem usage=0.06 GB, avail mem=9.65 GB.",
    "[{ts} TP{r}] max_total_num_tokens=65850615, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=4096, context_len=4096, available_gpu_mem=9.65 GB",
)
READY = ("[{ts}] INFO:     Application startup complete.",
         "[{ts}] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
         "[{ts}] The server is fired up and ready to roll!")


def startup() -> list[str]:
    ts = _stamp(0)
    return [line.format(ts=ts, r=r) for line in STARTUP for r in range(8)] + [line.format(ts=ts) for line in READY]


BASE_LINES = 200_000  # distinct lines generated; a bigger file repeats them (speed of generation)


def generate(path: str, mix: str, total: int, seed: int = 19) -> Written:
    """Write about `total` lines of `mix` to `path` (a base of BASE_LINES repeated)."""
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; one of {', '.join(MIXES)}")
    base, counts = _base(mix, min(total, BASE_LINES), seed)
    text = "\n".join(base) + "\n"
    data = text.encode()
    repeats = max(1, round(total / len(base)))
    head = "\n".join(startup()) + "\n"
    with open(path, "wb") as handle:
        handle.write(head.encode())
        for _ in range(repeats):
            handle.write(data)
    return Written(lines=len(base) * repeats + head.count("\n"), bytes=len(data) * repeats + len(head),
                   tracebacks=counts.tracebacks * repeats, long_lines=counts.long_lines * repeats,
                   untagged=counts.untagged * repeats)


def _base(mix: str, total: int, seed: int) -> tuple[list[str], Written]:
    rng = random.Random(seed)
    pool = [generator for weight, generator in _WEIGHTS[mix] for _ in range(weight)]
    longs = {generator: [generator(rng, _stamp(0)) for _ in range(8)] for generator in (long_tagged, long_untagged)}
    counts = Written()
    # Tracebacks: a handful in typical/noisy (the pipeline must still find them), 30 % in worst.
    traceback_every = max(1, round(TRACEBACK_LINES / 0.30)) if mix == "worst" else max(1000, total // 20)
    flood_every = total // 3 if mix == "noisy" else 0  # noisy: floods of 4,096 assert lines
    lines: list[str] = []
    next_traceback, next_flood = traceback_every, (flood_every // 2 if flood_every else -1)
    while len(lines) < total:
        ts = _stamp(len(lines) // 400)
        if len(lines) >= next_traceback:
            block = traceback(rng, ts)
            counts.tracebacks += 1
            next_traceback += traceback_every
        elif next_flood >= 0 and len(lines) >= next_flood:
            block = [ASSERT.format(b=i // 128, t=i % 128) for i in range(4096)]
            next_flood += flood_every
        else:
            generator = rng.choice(pool)
            block = [rng.choice(longs[generator]) if generator in longs else generator(rng, ts)]
            counts.long_lines += generator in longs
        counts.untagged += sum(not (line[:1] == "[" and line[1:2].isdigit()) for line in block)
        lines += block
    return lines, counts
