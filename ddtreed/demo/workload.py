"""One tensor-parallel rank of the demo service: real torch buffers, a real CUDA graph on a GPU.

Started by `ddtreed.demo.server` as `python -m ddtreed.demo.workload RANK ARGS_JSON`; requests
arrive as JSON lines on stdin, results leave as JSON lines on stdout, logs go to stderr in
SGLang's format. The only demo module that imports torch (the daemon never does).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
import warnings

from . import args as demo_args
from . import language_model as model

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1
_PARENT_KILL_WAIT_S = 30.0  # after SIGQUIT the parent kills the tree; never linger past this


def main() -> None:
    rank, server_args = int(sys.argv[1]), demo_args.from_json(sys.argv[2])
    tag = f" TP{rank}" if server_args.tp_size > 1 else ""
    logger = demo_args.configure_logging(tag)
    _become_scheduler(rank, server_args.tp_size)
    parent = os.getppid()
    try:
        worker = Worker(rank, server_args, logger)
        _send({"event": "ready"})
        for line in sys.stdin:
            _send(worker.generate(json.loads(line)))
    except Exception:
        # SGLang's scheduler: log the traceback, tell the launcher, wait to be killed with the tree.
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        os.kill(parent, signal.SIGQUIT)
        deadline = time.monotonic() + _PARENT_KILL_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
        sys.exit(1)


def _become_scheduler(rank: int, tp_size: int) -> None:
    """Name the process like SGLang's children and die with the launcher (PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    title = f"sglang::scheduler_TP{rank}" if tp_size > 1 else "sglang::scheduler"
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()), 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Worker:
    """Loads the target table, captures the verify graph, runs speculative decoding."""

    def __init__(self, rank: int, server_args, logger):
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch

        from ddtreed_demo_engine.cuda_graph_runner import CudaGraphRunner

        self.torch, self.rank, self.args, self.log = torch, rank, server_args, logger
        self.device = _pick_device(torch, server_args.device)
        self._load_weights()
        reserve = (_capture_reserve(torch, self.device, server_args.cuda_graph_max_bs)
                   if server_args.fault == "oom-at-capture" else 0)
        started = time.monotonic()
        # real 0.5.16 wording (tests/fixtures/sglang-0.5.16/ngram.log); no capture lines without
        # graphs, as real SGLang under --disable-cuda-graph
        graphs = _replays_graph(server_args)
        if graphs:
            self.log.info("Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=%d, "
                          "bs=%s, avail mem=%.2f GB", _width(server_args),
                          list(range(1, server_args.cuda_graph_max_bs + 1)), _avail_gb(torch, self.device))
        self.runner = CudaGraphRunner(server_args, torch, self._forward, self.device, reserve)
        if graphs:
            self.log.info("Capture target verify CUDA graph end. elapsed=%.2f s, mem usage=0.00 GB, "
                          "avail mem=%.2f GB.", time.monotonic() - started, _avail_gb(torch, self.device))
        if rank == 0:
            self.log.info("max_total_num_tokens=4096, chunked_prefill_size=8192, max_prefill_tokens="
                          "16384, max_running_requests=%d, context_len=4096, available_gpu_mem=%.2f GB",
                          server_args.max_running_requests, _avail_gb(torch, self.device))
        self.stats = {"steps": 0, "tokens": 0, "started": time.monotonic()}

    def _load_weights(self) -> None:
        torch = self.torch
        self.log.info("Load weight begin. avail mem=%.2f GB", _avail_gb(torch, self.device))
        time.sleep(self.args.load_seconds)  # stands in for reading a checkpoint
        rows = torch.arange(model.VOCAB_SIZE)
        table = torch.zeros(model.VOCAB_SIZE, model.VOCAB_SIZE)
        table[rows, (rows * 37 + 11) % model.VOCAB_SIZE] = 1.0  # model.target_next as weights
        self.table = table.to(self.device)
        self.log.info("Load weight end. elapsed=%.2f s, type=DemoBigramForCausalLM, avail mem=%.2f GB, "
                      "mem usage=0.00 GB.", self.args.load_seconds, _avail_gb(torch, self.device))
        self.log.info("KV Cache is allocated. dtype: torch.float32, #tokens: 4096, K size: 0.00 GB, "
                      "V size: 0.00 GB")
        self.log.info("Memory pool end. avail mem=%.2f GB", _avail_gb(torch, self.device))

    def _forward(self, input_ids):
        """The target model: next-token logits per position, greedy ids out."""
        return self.table[input_ids].argmax(dim=-1)

    def generate(self, request: dict) -> dict:
        ids, limit = request["input_ids"], int(request["max_new_tokens"])
        if self.rank == 0:
            self.log.info("Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, token "
                          "usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: "
                          "False, input throughput (token/s): 0.00", len(ids))
        prompt = self.torch.tensor(ids[-1:], device=self.device)
        output = [int(self._forward(prompt)[0])]  # prefill: eager, no graph
        steps = 0
        while len(output) < limit:
            output += self._verify_step(output[-1])
            steps += 1
            self._log_decode(len(output))
        output = output[:limit]
        accept = len(output) / steps if steps else 1.0
        return {"id": request["id"], "output_ids": output, "verify_ct": steps,
                "accept_length": accept}

    def _verify_step(self, root: int) -> list[int]:
        args = self.args
        collapse = args.collapse_acceptance
        if args.speculative_algorithm == "DDTREE":
            tree = model.build_tree(root, args.speculative_num_draft_tokens,
                                    args.speculative_ddtree_budget, collapse)
        else:
            tree = model.chain_tree(root, args.speculative_num_draft_tokens, collapse)
        tokens, raw_bs = list(tree.tokens), 1
        if args.fault == "device-assert":
            # Every id of the largest captured batch out of range: each gather thread of the
            # replayed graph asserts, thousands of lines before torch raises (as on a real GPU).
            raw_bs = self.runner.capture_bs[-1]
            tokens = [model.VOCAB_SIZE + 7] * (raw_bs * self.runner.num_tokens_per_bs)
        batch = self.torch.tensor(tokens, device=self.device)
        predictions = self.runner.replay(batch, raw_bs=raw_bs).tolist()
        budget = args.speculative_ddtree_budget
        garbage = args.garbage_above_budget is not None and budget is not None and \
            budget > args.garbage_above_budget
        emitted = model.accept(tree, predictions, verify=not garbage)
        self.stats["steps"] += 1
        self.stats["tokens"] += len(emitted)
        return emitted

    def _log_decode(self, running_tokens: int) -> None:
        stats = self.stats
        if self.rank != 0 or stats["steps"] % self.args.decode_log_interval:
            return
        accept = stats["tokens"] / stats["steps"]
        elapsed = max(time.monotonic() - stats["started"], 1e-6)
        width = demo_args.tokens_per_request(self.args)
        self.log.info("Decode batch, #running-req: 1, #token: %d, token usage: 0.00, accept len: "
                      "%.2f, accept rate: %.2f, cuda graph: %s, gen throughput (token/s): %.2f, "
                      "#queue-req: 0", running_tokens, accept, (accept - 1) / max(width - 1, 1),
                      _replays_graph(self.args), stats["tokens"] / elapsed)
        stats.update(steps=0, tokens=0, started=time.monotonic())


def _replays_graph(server_args) -> bool:
    """Decode steps replay the captured verify graph: a real CUDA graph on a GPU, its static
    buffers on the CPU (the imitation's graph), none under --disable-cuda-graph."""
    return not server_args.disable_cuda_graph


def _pick_device(torch, wanted: str):
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", 0)
    return torch.device("cpu")


def _width(server_args) -> int:
    from ddtreed_demo_engine.cuda_graph_runner import target_verify_width

    return target_verify_width(server_args)


def _avail_gb(torch, device) -> float:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / 2**30
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


def _capture_reserve(torch, device, max_bs: int) -> int:
    """Capture workspace that grows with the largest captured batch: the out-of-memory fault.

    At max bs 8 each rank asks for 55% of the card, so the ranks together ask for more than it has
    (plain allocations, never managed memory); halving the batch size (the rule's first
    remediation) makes it fit, as lowering --cuda-graph-max-bs does for a real capture.
    """
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return int(total * 0.55 * max_bs / 8)
    return 1 << 48  # 256 TiB: no CPU allocator grants it


if __name__ == "__main__":
    main()
