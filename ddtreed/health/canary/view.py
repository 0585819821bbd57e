"""A canary result as the text `ddtreed canary status|check|record` prints."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .results import CanaryResult


def render(result: CanaryResult, goldens: list[dict[str, Any]] | None = None) -> str:
    """Verdict, key, acceptance, one line per prompt, then the first divergence's diff."""
    verdict = "PASSED" if result.passed else f"FAILED ({result.category or 'could not run'})"
    key = result.key
    lines = [f"canary: {verdict} at {utc(result.at)}",
             f"  model: {key.model or '-'}  draft: {key.draft_model or '-'}  "
             f"sglang: {key.sglang_version or '-'}",
             f"  detail: {result.detail}",
             f"  acceptance: {_number(result.accept_length)}"
             f" (baseline {_number(result.baseline)})"]
    if goldens is not None:
        trusted = sum(1 for golden in goldens if golden["trusted"])
        newest = max((golden["recorded_at"] for golden in goldens), default=None)
        lines.append(f"  goldens: {len(goldens)} ({trusted} trusted)"
                     + (f", recorded {utc(newest)}" if newest else ""))
    for index, prompt in enumerate(result.prompts, 1):
        state = "ok" if prompt.passed else prompt.problem or "fail"
        lines.append(f"  {index}. {state:<10} accept {_number(prompt.accept_length):>5}  "
                     f"{_short(prompt.prompt)}: {prompt.detail}")
    diverged = result.first_divergence
    if diverged is not None:
        # A passing prompt may differ past the agreement window: variation, not a divergence.
        what = "first divergence" if not diverged.passed else "first variation (tolerated)"
        lines.append(f"  {what} (prompt {result.prompts.index(diverged) + 1}, "
                     f"token {diverged.first_divergence + 1}, compared as {diverged.compared_as}):")
        lines.extend(f"    {line}" for line in diverged.diff)
    return "\n".join(lines)


def utc(at: float | None) -> str:
    if not at:
        return "-"
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _short(prompt: str, limit: int = 32) -> str:
    text = " ".join(prompt.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
