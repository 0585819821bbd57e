"""Parse an SGLang launch argv into a ServiceContext (reads nothing but the draft config.json)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

import structlog

from ..records import ServiceContext

log = structlog.get_logger(__name__)

DraftConfigReader = Callable[[str], "Mapping[str, Any] | None"]

# SGLang rewrites these algorithm names before anything else looks at them.
ALGORITHM_ALIASES = {"NEXTN": "EAGLE"}
DFLASH_FAMILY = ("DFLASH", "DDTREE")
DEFAULT_DFLASH_BLOCK_SIZE = 16  # SGLang's fallback when neither flag nor draft config names one

# Flags naming the DFlash block size, strongest first (a DDTree fork's own flag wins).
BLOCK_SIZE_FLAGS = (
    "speculative-ddtree-block-size",
    "speculative-dflash-block-size",
    "speculative-num-draft-tokens",
)

# SGLang flags that take no value (store_true / deprecated store-true actions). Every
# `--enable-*` / `--disable-*` flag is boolean too; these are the others.
BOOLEAN_FLAGS = frozenset({
    "trust-remote-code", "skip-tokenizer-init", "skip-server-warmup", "is-embedding",
    "log-requests", "show-time-cost", "allow-auto-truncate", "debug-cuda-graph",
    "triton-attention-reduce-in-fp32", "enforce-piecewise-cuda-graph", "delete-ckpt-after-loading",
    "sleep-on-idle", "use-ray", "grpc-mode", "encoder-only", "language-only",
    "incremental-streaming-output", "stream-response-default-include-usage",
    "speculative-adaptive", "speculative-skip-dp-mlp-sync", "speculative-dflash-enable-ddtree",
    "keep-mm-feature-on-device", "pre-warm-nccl", "export-metrics-to-file",
    "schedule-low-priority-values-first", "strip-thinking-cache", "quantize-and-serve",
    "weight-loader-disable-mmap", "weight-loader-drop-cache-after-load",
    "weight-loader-prefetch-checkpoints", "constrained-json-disable-any-whitespace",
    "flashinfer-mla-disable-ragged", "lora-strict-loading", "crash-on-nan",
    "abort-on-priority-when-disabled", "prefill-only-disable-kv-cache", "elastic-ep-rejoin",
})


def normalize_flag(name: str) -> str:
    """`--tp_size` and `--tp-size` are one flag to argparse-minded users: `tp-size`."""
    return name.lstrip("-").replace("_", "-")


def is_boolean_flag(name: str) -> bool:
    return name in BOOLEAN_FLAGS or name.startswith(("enable-", "disable-"))


def _launcher_end(argv: list[str]) -> int:
    """Index of the first SGLang argument after `-m sglang.launch_server` / `sglang serve`."""
    for index, token in enumerate(argv):
        base = os.path.basename(token)
        if token == "sglang.launch_server" or base == "launch_server.py":
            return index + 1
        if base == "sglang" and index + 1 < len(argv) and argv[index + 1] == "serve":
            return index + 2
        if token == "sglang.cli.main" and index + 1 < len(argv) and argv[index + 1] == "serve":
            return index + 2
    # Unknown wrapper: SGLang's own arguments start at the first long flag.
    return next((i for i, token in enumerate(argv) if token.startswith("--")), len(argv))


def split_flags(argv: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Every `--flag [values…]` after the launcher as {normalised name: value}, and positionals.

    List flags (`--cuda-graph-bs 1 2 4`) keep their values space-joined; booleans are True.
    """
    flags: dict[str, str | bool] = {}
    positionals: list[str] = []
    tokens = argv[_launcher_end(argv):]
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--") or token == "--":
            positionals.append(token)
            continue
        name, equals, inline = token.partition("=")
        name = normalize_flag(name)
        if equals:
            flags[name] = inline
            continue
        values: list[str] = []
        if not is_boolean_flag(name):
            # SGLang has no positionals after the model, so every non-flag token is a value.
            while index < len(tokens) and not tokens[index].startswith("--"):
                values.append(tokens[index])
                index += 1
        flags[name] = " ".join(values) if values else True
    return flags, positionals


def _int(flags: Mapping[str, str | bool], *names: str) -> int | None:
    for name in names:
        value = flags.get(name)
        if isinstance(value, str):
            try:
                return int(value.split()[-1]) if value.split() else None
            except ValueError:
                return None
    return None


def _float(flags: Mapping[str, str | bool], name: str) -> float | None:
    value = flags.get(name)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _str(flags: Mapping[str, str | bool], *names: str) -> str | None:
    for name in names:
        value = flags.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def block_size_flags(flags: Mapping[str, str | bool]) -> dict[str, int]:
    """The block-size flags given, each parsed (preflight reports when they disagree)."""
    found = {}
    for name in BLOCK_SIZE_FLAGS:
        value = _int(flags, name)
        if value is not None:
            found[name] = value
    return found


def draft_block_size(draft_config: Mapping[str, Any] | None) -> int | None:
    """`dflash_config.block_size`, else top-level `block_size` (SGLang's own order)."""
    if not isinstance(draft_config, Mapping):
        return None
    nested = draft_config.get("dflash_config")
    for value in (nested.get("block_size") if isinstance(nested, Mapping) else None,
                  draft_config.get("block_size")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def read_local_draft_config(path: str) -> Mapping[str, Any] | None:
    """The draft model's `config.json` from a local directory; None when it is not one."""
    candidate = os.path.join(path, "config.json")
    try:
        with open(candidate, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("draft_config_unreadable", path=candidate, error=str(error))
        return None


def _algorithm(flags: Mapping[str, str | bool]) -> str | None:
    raw = _str(flags, "speculative-algorithm")
    if raw is None:
        return "DDTREE" if flags.get("speculative-dflash-enable-ddtree") is True else None
    upper = raw.upper()
    return ALGORITHM_ALIASES.get(upper, upper)


def _resolve_block_size(algorithm: str | None, flags: Mapping[str, str | bool],
                        draft_path: str | None,
                        reader: DraftConfigReader) -> tuple[int | None, str | None]:
    given = block_size_flags(flags)
    if given:
        return next(iter(given.values())), "flag"
    if algorithm not in DFLASH_FAMILY:
        return None, None
    if draft_path:
        from_config = draft_block_size(reader(draft_path))
        if from_config is not None:
            return from_config, "draft-config"
    return DEFAULT_DFLASH_BLOCK_SIZE, "default"


def parse_argv(argv, draft_config_reader: DraftConfigReader | None = None, *,
               read_draft_config: DraftConfigReader | None = None) -> ServiceContext:
    """The launch facts in an SGLang argv; reads nothing but the draft model's config.json."""
    argv = [str(token) for token in argv]
    reader = draft_config_reader or read_draft_config or read_local_draft_config
    flags, positionals = split_flags(argv)
    algorithm = _algorithm(flags)
    model_path = _str(flags, "model-path", "model") or (positionals[0] if positionals else None)
    draft_path = _str(flags, "speculative-draft-model-path", "speculative-draft")
    block_size, source = _resolve_block_size(algorithm, flags, draft_path, reader)
    budget = _int(flags, "speculative-ddtree-budget")
    if algorithm == "DDTREE" and budget is None and block_size is not None:
        budget = block_size - 1
    num_draft = _int(flags, "speculative-num-draft-tokens")
    if num_draft is None and algorithm in DFLASH_FAMILY:
        num_draft = block_size  # DFlash verifies one block: draft tokens == block size
    graph_backend = _str(flags, "cuda-graph-backend-decode")
    return ServiceContext(
        argv=tuple(argv),
        speculative_algorithm=algorithm,
        block_size=block_size,
        block_size_source=source,
        ddtree_budget=budget,
        ddtree_options=_ddtree_options(flags),
        num_draft_tokens=num_draft,
        draft_model_path=draft_path,
        model_path=model_path,
        tp_size=_int(flags, "tp", "tp-size", "tensor-parallel-size") or 1,
        dp_size=_int(flags, "dp", "dp-size", "data-parallel-size") or 1,
        pp_size=_int(flags, "pp", "pp-size", "pipeline-parallel-size") or 1,
        host=_str(flags, "host") or "127.0.0.1",
        port=_int(flags, "port") or 30000,
        disable_cuda_graph=flags.get("disable-cuda-graph") is True or graph_backend == "disabled",
        cuda_graph_max_bs=max_captured_batch_size(flags),
        max_running_requests=_int(flags, "max-running-requests"),
        attention_backend=_str(flags, "attention-backend"),
        mem_fraction_static=_float(flags, "mem-fraction-static"),
        page_size=_int(flags, "page-size"),
        flags=flags,
    )


def _ddtree_options(flags: Mapping[str, str | bool]) -> dict[str, str]:
    """Every other `--speculative-ddtree-*` flag (forks add their own), names without the prefix."""
    prefix = "speculative-ddtree-"
    return {
        name[len(prefix):]: str(value)
        for name, value in flags.items()
        if name.startswith(prefix) and name not in ("speculative-ddtree-budget",)
    }


def max_captured_batch_size(flags: Mapping[str, str | bool]) -> int | None:
    """The largest decode batch a CUDA graph is captured for, when the flags say so."""
    explicit = [
        int(token)
        for name in ("cuda-graph-bs", "cuda-graph-bs-decode")
        if isinstance(flags.get(name), str)
        for token in str(flags[name]).replace(",", " ").split()
        if token.isdigit()
    ]
    if explicit:
        return max(explicit)
    return _int(flags, "cuda-graph-max-bs-decode", "cuda-graph-max-bs")


