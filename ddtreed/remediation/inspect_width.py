"""Does an installed SGLang capture the DDTree target verify graph budget + 1 wide?

Shared by preflight and remediation so the two never disagree: both read the same layouts
from `ddtree-verify-graph-width` and the same files.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..service.host import Host, LocalHost
from ..paths import shipped
from . import patching
from .catalog import Remediation, load_remediations

REMEDIATION_ID = "ddtree-verify-graph-width"
# Where a DDTree build (PR #29907 or a fork) may already override the width upstream.
_WIDTH_FILES = (
    "sglang/srt/speculative/spec_info.py",
    "sglang/srt/speculative/spec_utils.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/model_executor/cuda_graph_runner.py",
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
)
_DDTREE_FILES = ("sglang/srt/speculative/spec_info.py", "sglang/srt/server_args.py")


@dataclass(frozen=True)
class WidthState:
    site_packages: str
    version: str | None  # of the distribution the chosen layout belongs to
    layout: str | None  # the layout that fits (None: none does)
    target: str | None  # absolute path of the file that sets the width
    ddtree_present: bool  # this build knows DDTREE at all
    fixed: bool  # the target verify width already becomes budget + 1 under DDTree
    patched_by_us: bool
    patchable: bool  # ddtree-verify-graph-width would apply cleanly now
    detail: str


def _budget_plus_one(source: str) -> bool:
    """An expression `<…ddtree_budget…> + 1` anywhere in the module (AST, not text)."""
    if "ddtree_budget" not in source:  # parsing a 3,000-line runner costs ~150 ms: skip when moot
        return False
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                and isinstance(node.right, ast.Constant) and node.right.value == 1
                and "ddtree_budget" in ast.unparse(node.left)):
            return True
    return False


def _read(host: Host, path: str) -> str | None:
    try:
        return host.read_bytes(path).decode("utf-8", errors="replace")
    except OSError:
        return None


def _upstream_fix(host: Host, site: str, remediation: Remediation) -> tuple[bool, bool]:
    """(ddtree_present, fixed upstream) from the width files, with ddtreed's own patch taken out."""
    present = fixed = False
    for relative in sorted(set(_WIDTH_FILES) | set(_DDTREE_FILES)):
        source = _read(host, f"{site}/{relative}")
        if source is None:
            continue
        for layout in remediation.layouts:
            source = source.replace(layout.patched_fragment(), layout.anchor)
        present = present or "DDTREE" in source
        if relative in _WIDTH_FILES and _budget_plus_one(source):
            fixed = True
    return present, fixed


def inspect_ddtree_width(site_packages: str, host: Host | None = None,
                         remediation: Remediation | None = None) -> WidthState:
    host = host or LocalHost()
    if remediation is None:
        remediation = load_remediations([shipped("remediations")]).get(REMEDIATION_ID)
    check = patching.check_patch(host, site_packages, remediation)
    present, upstream = _upstream_fix(host, site_packages, remediation)
    if check.layout is not None and check.layout.distribution != "sglang":
        present = True  # the demo engine is a DDTree service by construction
    ours = check.state == patching.APPLIED
    if ours:
        detail = f"patched by ddtreed (layout {check.layout.name}): target verify width is budget + 1"
    elif upstream:
        detail = "this build already sizes the target verify graph budget + 1 (upstream DDTree fix)"
    elif not present:
        detail = "no DDTree in this build: the verify width question does not arise"
    else:
        detail = f"DDTree target verify graph would be captured block-size wide; {check.reason}"
    return WidthState(site_packages=site_packages, version=check.version,
                      layout=check.layout.name if check.layout else None, target=check.path,
                      ddtree_present=present, fixed=ours or upstream, patched_by_us=ours,
                      patchable=check.state == patching.APPLICABLE, detail=detail)
