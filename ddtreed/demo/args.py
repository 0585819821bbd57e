"""The demo server's SGLang-style flags, and SGLang's log line format."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

FAULTS = ("none", "device-assert", "oom-at-capture")
DEFAULT_BLOCK_SIZE = 16  # SGLang's DFlash default when neither flag nor draft config names one


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddtreed.demo.server",
                                     description="A small SGLang-like DDTree/DFlash demo service.")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--speculative-algorithm", type=str.upper, default=None)
    parser.add_argument("--speculative-draft-model-path", default=None)
    parser.add_argument("--speculative-num-draft-tokens", "--speculative-dflash-block-size",
                        type=int, default=None)
    parser.add_argument("--speculative-ddtree-budget", type=int, default=None)
    parser.add_argument("--speculative-ddtree-topk-cap", type=int, default=8)
    parser.add_argument("--tp-size", "--tp", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--cuda-graph-max-bs", type=int, default=4)
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--max-running-requests", type=int, default=48)
    parser.add_argument("--trust-remote-code", action="store_true")
    # Demo knobs: not SGLang's.
    parser.add_argument("--load-seconds", type=float, default=2.0, help="time spent 'loading weights'")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--garbage-above-budget", type=int, default=None, metavar="N",
                        help="emit unverified (wrong) tokens when the DDTree budget exceeds N")
    parser.add_argument("--collapse-acceptance", action="store_true",
                        help="correct output, but every draft is rejected (accept length 1)")
    parser.add_argument("--decode-log-interval", type=int, default=4, metavar="STEPS")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse and resolve defaults the way SGLang does (block size, DDTree budget)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    algorithm = args.speculative_algorithm
    if algorithm in ("DFLASH", "DDTREE") and not args.speculative_draft_model_path:
        parser.error(f"--speculative-draft-model-path is required for {algorithm}")
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = _draft_block_size(args.speculative_draft_model_path)
    if algorithm == "DDTREE":
        if args.speculative_ddtree_budget is None:
            args.speculative_ddtree_budget = args.speculative_num_draft_tokens - 1
        if args.speculative_ddtree_budget < 1:
            parser.error("--speculative-ddtree-budget must be >= 1")
    if args.tp_size < 1 or args.cuda_graph_max_bs < 1:
        parser.error("--tp-size and --cuda-graph-max-bs must be >= 1")
    return args


def tokens_per_request(args: argparse.Namespace) -> int:
    """What one verify step carries per request: budget + 1 for DDTree, the block otherwise."""
    if args.speculative_algorithm == "DDTREE":
        return args.speculative_ddtree_budget + 1
    return args.speculative_num_draft_tokens


def describe(args: argparse.Namespace) -> str:
    fields = ", ".join(f"{key}={value!r}" for key, value in vars(args).items())
    return f"ServerArgs({fields})"


def to_json(args: argparse.Namespace) -> str:
    return json.dumps(vars(args))


def from_json(text: str) -> argparse.Namespace:
    return argparse.Namespace(**json.loads(text))


def configure_logging(rank_tag: str = "") -> logging.Logger:
    """`[YYYY-mm-dd HH:MM:SS TP3] message` on stderr, like SGLang (no level names)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[%(asctime)s{rank_tag}] %(message)s",
                                           datefmt="%Y-%m-%d %H:%M:%S"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    return logging.getLogger("sglang")


def _draft_block_size(draft_path: str | None) -> int:
    if not draft_path:
        return DEFAULT_BLOCK_SIZE
    try:
        config = json.loads((Path(draft_path) / "config.json").read_text())
    except (OSError, ValueError):
        return DEFAULT_BLOCK_SIZE
    nested = config.get("dflash_config") or {}
    return int(nested.get("block_size") or config.get("block_size") or DEFAULT_BLOCK_SIZE)
