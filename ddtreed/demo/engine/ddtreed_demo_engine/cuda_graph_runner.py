"""The target model's verify graph: static buffers captured once at a fixed width, replayed per batch.

The tensor library is handed in by the caller (the demo workload), so this file stays plain
source that ddtreed can read and patch without importing torch.
"""

CAPTURE_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
CAPTURE_FAILED_HINT = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"
)


def target_verify_width(server_args, is_draft_worker=False):
    """Tokens per request slot in the verify graph; the draft worker verifies its own block."""
    if is_draft_worker:
        return server_args.speculative_num_draft_tokens
    num_tokens_per_bs = server_args.speculative_num_draft_tokens
    return num_tokens_per_bs


class CudaGraphRunner:
    """Static input/output buffers of max_bs * width tokens; one CUDA graph per batch size."""

    def __init__(self, server_args, torch, forward, device, reserve_bytes=0):
        self.torch = torch
        self.forward = forward
        self.num_tokens_per_bs = target_verify_width(server_args)
        max_bs = server_args.cuda_graph_max_bs
        self.capture_bs = [bs for bs in CAPTURE_BATCH_SIZES if bs <= max_bs] or [1]
        self.max_num_token = self.capture_bs[-1] * self.num_tokens_per_bs
        self.use_graphs = device.type == "cuda" and not server_args.disable_cuda_graph
        self.graphs = {}
        self.raw_num_token = 0
        try:
            # The workspace a real capture needs beyond the buffers (activations, graph pool).
            # Without graphs on a GPU there is no capture to reserve for (--disable-cuda-graph
            # fixes a capture OOM); on the CPU the fault is simulated either way.
            needs_workspace = self.use_graphs or device.type != "cuda"
            self.workspace = torch.empty(reserve_bytes if needs_workspace else 0, dtype=torch.uint8,
                                         device=device)
            self.input_ids = torch.zeros(self.max_num_token, dtype=torch.long, device=device)
            self.output_ids = torch.zeros(self.max_num_token, dtype=torch.long, device=device)
            if self.use_graphs:
                self.capture()
        except RuntimeError as error:
            raise Exception(f"Capture cuda graph failed: {error}\n{CAPTURE_FAILED_HINT}") from error

    def capture(self):
        torch = self.torch
        for bs in self.capture_bs:
            num_tokens = bs * self.num_tokens_per_bs
            # torch requires a warm-up run on a side stream before capture.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.output_ids[:num_tokens].copy_(self.forward(self.input_ids[:num_tokens]))
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.output_ids[:num_tokens].copy_(self.forward(self.input_ids[:num_tokens]))
            self.graphs[bs] = graph
        torch.cuda.synchronize()

    def replay(self, input_ids, raw_bs):
        """The target's prediction for every token of the batch, through the captured graph."""
        self.replay_prepare(input_ids, raw_bs)
        bs = next(size for size in self.capture_bs if size >= raw_bs)
        if self.use_graphs:
            self.graphs[bs].replay()
        else:
            num_tokens = bs * self.num_tokens_per_bs
            self.output_ids[:num_tokens].copy_(self.forward(self.input_ids[:num_tokens]))
        return self.output_ids[: self.raw_num_token]

    def replay_prepare(self, input_ids, raw_bs):
        # The graph reads fixed addresses: the batch is copied into the captured buffers.
        self.raw_num_token = raw_bs * self.num_tokens_per_bs
        self.input_ids[: self.raw_num_token].copy_(input_ids)
