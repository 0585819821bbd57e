"""The founding check: a DDTree target verify graph captured narrower than budget + 1.

Decided by `remediation.width.inspect_ddtree_width`, the same layouts and anchors the
`ddtree-verify-graph-width` patch uses, so preflight and remediation cannot disagree.
"""

from __future__ import annotations

from typing import Iterable

from ..remediation.flags import parse_version
from ..remediation.inspect_width import REMEDIATION_ID, inspect_ddtree_width
from .finding import WARNING, WOULD_CRASH, Finding, Skipped

# From 0.5.16 a batch wider than the captured graph runs eagerly instead of crashing.
EAGER_FALLBACK_SINCE = (0, 5, 16)
SWITCH_TO_DFLASH = "ddtree-to-dflash"


def width_state(inputs):
    """The installed code's width verdict, computed once per preflight run."""
    context = inputs.context
    if context.speculative_algorithm != "DDTREE":
        return None
    if not context.site_packages:
        raise Skipped("sglang was not found for the service's interpreter, so its CUDA-graph code "
                      "cannot be read")
    if "width" not in inputs.memo:
        inputs.memo["width"] = inspect_ddtree_width(context.site_packages, inputs.host)
    return inputs.memo["width"]


def check_ddtree_available(inputs) -> Iterable[Finding]:
    """DDTree requested from a build whose built-in algorithms do not name it."""
    state = width_state(inputs)
    if state is None or state.ddtree_present or state.fixed:
        return []
    return [_no_ddtree(inputs.context, state)]


def check_ddtree_width(inputs) -> Iterable[Finding]:
    context = inputs.context
    budget, block = context.ddtree_budget, context.block_size
    state = width_state(inputs)
    if state is None or state.fixed or budget is None or block is None:
        return []
    width = budget + 1
    if width == block:
        return []  # budget = block size - 1 is a chain exactly block-size wide: nothing to fix
    version = state.version or context.sglang_version
    eager = version is not None and parse_version(version) >= EAGER_FALLBACK_SINCE
    remediations = ((REMEDIATION_ID,) if state.patchable else ()) + (SWITCH_TO_DFLASH,)
    return [Finding(
        check="ddtree-verify-width",
        severity=WARNING if eager else WOULD_CRASH,
        category="cuda-graph-shape-mismatch",
        what=(f"DDTree verify batches ({width} wide) cannot replay the target CUDA graph: "
              + ("they silently run eagerly (no crash, no graph speed-up)" if eager else
                 f"the first request fails with `The size of tensor a ({block}) must match the size "
                 f"of tensor b ({width}) at non-singleton dimension 0`")),
        why=(f"budget {budget} + 1 root = {width} tokens per request, but the installed code "
             f"({state.layout or 'unknown layout'}, {version or 'unknown version'}) captures the "
             f"target verify graph at the block size {block}"
             + (f"; {state.detail}" if state.ddtree_present else "")),
        remediations=remediations,
        advice=("" if state.patchable else
                f"the {REMEDIATION_ID} patch does not apply here; fall back to DFLASH or install "
                f"a DDTree build that sizes the target verify graph budget + 1"),
        params={"ddtree_budget": budget, "block_size": block, "verify_width": width,
                "captured_width": block, "layout": state.layout, "target": state.target,
                "version": version},
    )]


def _no_ddtree(context, state) -> Finding:
    version = state.version or context.sglang_version
    # A warning, not a certainty: a plugin can register DDTREE without touching these files.
    return Finding(
        check="ddtree-available", severity=WARNING, category="unsupported-config",
        what="SGLang may refuse --speculative-algorithm DDTREE at startup",
        why=f"the installed sglang ({version or 'unknown version'} at {context.site_packages}) names "
            f"no DDTREE in its built-in algorithms (DDTree is in no release up to 0.5.23)",
        advice="install a DDTree build (e.g. pull request #29907), or run DFLASH "
               f"(remediation {SWITCH_TO_DFLASH})",
        params={"version": version, "site_packages": context.site_packages},
    )
