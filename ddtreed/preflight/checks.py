"""The preflight checks: each reads the launch context (and the disk) and returns findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..context import (
    DFLASH_FAMILY,
    block_size_flags,
    draft_block_size,
    host_draft_config_reader,
    read_local_draft_config,
)
from ..remediation import flags as flag_table
from .environment import (check_launch_program, check_service_python, check_sglang_installed,
                          check_writable_dirs)
from .finding import WARNING, WOULD_CRASH, Finding, Skipped
from .width import check_ddtree_available, check_ddtree_width

DFLASH_DEFAULT_MAX_RUNNING_REQUESTS = 48  # SGLang resets DFlash's max running requests to 48


@dataclass(frozen=True)
class Inputs:
    config: Any
    context: Any  # records.ServiceContext
    host: Any
    draft_config_reader: Callable[[str], Any] | None = None
    memo: dict = field(default_factory=dict)  # results two checks share (the width verdict)

    def read_draft_config(self, path: str):
        if self.draft_config_reader is not None:
            return self.draft_config_reader(path)
        if getattr(self.host, "local", False):
            return read_local_draft_config(path)
        return host_draft_config_reader(self.host)(path)


def check_unsupported_flags(inputs: Inputs) -> Iterable[Finding]:
    """Flags the installed SGLang's argparse rejects: the server exits 2 before loading anything."""
    context = inputs.context
    version = context.sglang_version
    if version is None:
        raise Skipped("the installed sglang version is unknown, so its accepted flags are too")
    findings = []
    for name in context.flags:
        for logical, options in flag_table.FLAGS.items():
            spelling = next((s for s in options if s.name == f"--{name}"), None)
            if spelling is None or spelling.accepted_by(version) is not False:
                continue
            findings.append(_rejected_flag(name, logical, spelling, version))
    return findings


def _rejected_flag(name: str, logical: str, spelling, version: str) -> Finding:
    bounds = f"{spelling.since or 'any'} .. {spelling.until or 'latest'}"
    try:
        replacement = flag_table.choose(logical, version)
    except flag_table.FlagUnavailable:
        replacement = None
    advice = (f"use {replacement} instead" if replacement and replacement != f"--{name}"
              else f"remove --{name}: sglang {version} has no spelling of it")
    return Finding(
        check="unsupported-flags", severity=WOULD_CRASH, category="unsupported-config",
        what=f"sglang {version} exits at argument parsing (exit code 2) on --{name}",
        why=f"--{name} exists only in sglang {bounds}; the installed version is {version}",
        advice=advice, params={"flag": f"--{name}", "version": version, "replacement": replacement},
    )


def check_ddtree_settings(inputs: Inputs) -> Iterable[Finding]:
    """Settings the DDTree implementation refuses at startup (ValueError before serving)."""
    context = inputs.context
    if context.speculative_algorithm != "DDTREE":
        return []
    findings = []
    page_size = context.page_size
    if page_size is not None and page_size != 1:
        findings.append(_ddtree_refusal(
            "page size", f"--page-size is {page_size}; DDTree's tree KV layout needs page size 1",
            {"page_size": page_size}, advice="launch with --page-size 1"))
    budget, block = context.ddtree_budget, context.block_size
    if budget is not None and budget < 1:
        findings.append(_ddtree_refusal(
            "budget", f"--speculative-ddtree-budget is {budget}; it must be at least 1",
            {"ddtree_budget": budget}, advice="set --speculative-ddtree-budget to 1 or more"))
    backend = context.attention_backend
    if budget is not None and block is not None and budget > block - 1 and backend != "triton":
        findings.append(_ddtree_refusal(
            "full-tree backend",
            f"budget {budget} > block size {block} - 1 = {block - 1} is a full tree, which needs "
            f"--attention-backend triton (given: {backend or 'the default backend'})",
            {"ddtree_budget": budget, "block_size": block, "attention_backend": backend},
            advice="add --attention-backend triton, or lower the budget to block size - 1"))
    if context.flags.get("speculative-use-rejection-sampling") is True:
        findings.append(_ddtree_refusal(
            "rejection sampling", "--speculative-use-rejection-sampling is set; DDTree verifies "
            "greedily along the tree and refuses rejection sampling", {},
            advice="remove --speculative-use-rejection-sampling"))
    return findings


def _ddtree_refusal(setting: str, why: str, params: dict, advice: str) -> Finding:
    return Finding(
        check="ddtree-settings", severity=WOULD_CRASH, category="unsupported-config",
        what=f"the DDTree server refuses to start ({setting})", why=why,
        advice=advice, params={"setting": setting, **params},
    )


def check_dflash_block_size(inputs: Inputs) -> Iterable[Finding]:
    """Block-size flags that disagree (startup ValueError), or differ from the drafter's config."""
    context = inputs.context
    if context.speculative_algorithm not in DFLASH_FAMILY:
        return []
    given = block_size_flags(context.flags)
    if len(set(given.values())) > 1:
        listed = ", ".join(f"--{name} {value}" for name, value in given.items())
        return [Finding(
            check="dflash-block-size", severity=WOULD_CRASH, category="unsupported-config",
            what="SGLang refuses to start: the DFlash block-size flags disagree",
            why=f"{listed}: for DFlash they must be equal",
            advice="give the block size once (--speculative-num-draft-tokens)", params=dict(given),
        )]
    if context.block_size_source != "flag" or not context.draft_model_path:
        return []
    trained = draft_block_size(inputs.read_draft_config(context.draft_model_path))
    if trained is None or trained == context.block_size:
        return []
    return [Finding(
        check="dflash-block-size", severity=WARNING, category="acceptance-collapse",
        what="the drafter runs with a block size it was not trained for (acceptance drops)",
        why=f"the flags say block size {context.block_size}; the draft model's config.json says "
            f"{trained} ({context.draft_model_path})",
        advice=f"drop the block-size flag or set it to {trained}",
        params={"block_size": context.block_size, "draft_config_block_size": trained},
    )]


def check_cuda_graph_batch(inputs: Inputs) -> Iterable[Finding]:
    """DFlash's static buffers are sized for the largest captured batch; more requests overflow."""
    context = inputs.context
    if context.speculative_algorithm not in DFLASH_FAMILY or context.disable_cuda_graph:
        return []
    captured = context.cuda_graph_max_bs
    running = context.max_running_requests
    source = "--max-running-requests"
    if running is None:
        running, source = DFLASH_DEFAULT_MAX_RUNNING_REQUESTS, "the DFlash default"
    if captured is None or running <= captured:
        return []
    # The shipped remediation halves the limit (48 -> 24 when absent): it helps only if half fits.
    halving_fits = max(1, running // 2) <= captured
    return [Finding(
        check="cuda-graph-batch", severity=WOULD_CRASH, category="cuda-graph-shape-mismatch",
        what=f"a batch of more than {captured} requests overflows DFlash's CUDA-graph buffers",
        why=f"max running requests is {running} ({source}) but the largest captured CUDA-graph "
            f"batch size is {captured}",
        remediations=("lower-max-running-requests",) if halving_fits else (),
        advice=f"set --max-running-requests {captured}, or capture batch sizes up to {running}",
        params={"max_running_requests": running, "cuda_graph_max_bs": captured},
    )]


def check_port(inputs: Inputs) -> Iterable[Finding]:
    """Something already holds the service's port: SGLang's HTTP server would fail to bind."""
    context = inputs.context
    address = context.host or "127.0.0.1"
    if not inputs.host.port_in_use(address, context.port):
        return []
    return [Finding(
        check="port-in-use", severity=WOULD_CRASH, category="port-in-use",
        what=f"the HTTP server cannot bind {address}:{context.port}",
        why=f"port {context.port} is already in use on {getattr(inputs.host, 'name', 'the host')}",
        advice="stop what holds the port (e.g. a previous server) or change --port",
        params={"port": context.port, "address": address},
    )]


def check_gpu_holders(inputs: Inputs) -> Iterable[Finding]:
    """Processes already on the GPUs (often orphaned schedulers): the new load may run out of memory."""
    holders = getattr(inputs.host, "gpu_holders", None)
    pids = holders() if holders is not None else []
    if not pids:
        return []
    shown = ", ".join(str(pid) for pid in sorted(pids)[:8])
    return [Finding(
        check="gpus-held", severity=WARNING, category="cuda-oom",
        what="model loading may run out of GPU memory",
        why=f"{len(pids)} process(es) already hold a GPU: pid {shown}",
        advice="stop them (orphaned sglang::scheduler processes keep ~100 GB each) before launch",
        params={"pids": sorted(pids)},
    )]


CHECKS: dict[str, Callable[[Inputs], Iterable[Finding]]] = {
    "launch-program": check_launch_program,
    "service-python": check_service_python,
    "sglang-installed": check_sglang_installed,
    "writable-dirs": check_writable_dirs,
    "ddtree-verify-width": check_ddtree_width,
    "ddtree-available": check_ddtree_available,
    "unsupported-flags": check_unsupported_flags,
    "ddtree-settings": check_ddtree_settings,
    "dflash-block-size": check_dflash_block_size,
    "cuda-graph-batch": check_cuda_graph_batch,
    "port-in-use": check_port,
    "gpus-held": check_gpu_holders,
}
