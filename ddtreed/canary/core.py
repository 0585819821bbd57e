"""Golden outputs and the canary check: greedy prompts compared token by token, acceptance watched."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace as _replace
from typing import Any, Callable, Sequence

import structlog

from ..config import CanaryConfig
from ..records import ServiceContext
from . import client
from .compare import LoopLimit, compare, degenerate_loop, degenerate_repetition, output_tokens
from .results import (ACCEPTANCE_COLLAPSE, SILENT_CORRUPTION, CanaryResult, GoldenKey,
                      PromptResult)

log = structlog.get_logger(__name__)

# Short, fixed, varied (prose, a list, code, translation): greedy output of each is stable.
DEFAULT_PROMPTS = (
    "The capital of France is",
    "List the first ten prime numbers, separated by commas:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Translate to German: The weather is nice today, so we walk along the river.",
)


class CanaryError(RuntimeError):
    """Goldens could not be recorded (the service did not answer, or answered degenerately)."""


def golden_key(context: ServiceContext) -> GoldenKey:
    """(model, draft model, sglang version) of the service: what a golden output belongs to."""
    return GoldenKey(context.model_path or "", context.draft_model_path or "",
                     context.sglang_version or "")


def validate(config: CanaryConfig) -> None:
    """One ValueError naming the key when a [canary] value cannot work."""
    checks = {"max_new_tokens": config.max_new_tokens > 0, "timeout_s": config.timeout_s > 0,
              "max_divergent_tokens": config.max_divergent_tokens >= 0,
              "interval_s": config.interval_s >= 0, "busy_requests": config.busy_requests > 0,
              "collapse_baseline_fraction": 0 <= config.collapse_baseline_fraction <= 1,
              "degenerate_loop_share": 0 <= config.degenerate_loop_share <= 1,
              "degenerate_loop_period": config.degenerate_loop_period >= 1}
    for key, ok in checks.items():
        if not ok:
            raise ValueError(f"canary.{key}: out of range, got {getattr(config, key)!r}")
    if any(not prompt.strip() for prompt in config.prompts):
        raise ValueError("canary.prompts: a prompt is empty")


class Canary:
    """`check` a running service against its goldens; `record` trusted goldens. Owns no thread."""

    def __init__(self, store, config: CanaryConfig,
                 key_from_context: Callable[[ServiceContext], GoldenKey] = golden_key,
                 baseline_key: Callable[[ServiceContext], str] | None = None,
                 clock: Callable[[], float] = time.time):
        validate(config)
        if baseline_key is None:
            from ..verify import baseline_key as verifier_key  # one learned baseline for both

            baseline_key = verifier_key
        self.store, self.config, self.clock = store, config, clock
        self.key_from_context, self.baseline_key = key_from_context, baseline_key

    @property
    def prompts(self) -> tuple[str, ...]:
        return tuple(self.config.prompts) or DEFAULT_PROMPTS

    def check(self, prober, context: ServiceContext) -> CanaryResult:
        """Run every prompt, compare with the goldens, judge acceptance; store the run."""
        key = self.key(prober, context)
        goldens = {row["prompt"]: row for row in self.store.goldens(*key)}
        generations = self._generate_all(prober)
        prompts = [self._judge(prompt, generation, goldens.get(prompt))
                   for prompt, generation in zip(self.prompts, generations)]
        result = self._verdict(key, prompts, context)
        if result.passed:
            result = self._learn(result, generations, context)
        self.store.record_canary_run(*key, passed=result.passed, detail=result.detail,
                                     accept_length=result.accept_length, data=result.to_dict(),
                                     at=result.at)
        event = log.info if result.passed else log.warning
        event("canary.checked", passed=result.passed, category=result.category,
              detail=result.detail, accept_length=result.accept_length, model=key.model)
        return result

    def record(self, prober, context: ServiceContext, trusted: bool = True) -> CanaryResult:
        """Replace this key's goldens with the service's current outputs (all or nothing)."""
        key = self.key(prober, context)
        generations = self._generate_all(prober)
        for index, (prompt, generation) in enumerate(zip(self.prompts, generations), 1):
            problem = _unusable(generation, self.config.repetition_limit, loop_limit(self.config))
            if problem:
                raise CanaryError(f"prompt {index} ({prompt[:40]!r}): {problem[1]}; no goldens recorded")
        self.store.delete_goldens(*key)
        for prompt, generation in zip(self.prompts, generations):
            self.store.save_golden(*key, prompt, generation.ids, generation.text or "",
                                   trusted=trusted)
        prompts = tuple(PromptResult(prompt, True, detail="recorded", recorded=True,
                                     accept_length=g.accept_length, elapsed_s=g.elapsed_s,
                                     tokens=len(output_tokens(g.ids, g.text)[1]), output_text=g.text)
                        for prompt, g in zip(self.prompts, generations))
        accept = _mean(g.accept_length for g in generations)
        if accept is not None and context.speculative_algorithm and \
                accept > self.config.collapse_accept_length:
            self.store.add_accept_sample(self.baseline_key(context), accept)
        log.info("canary.recorded", goldens=len(prompts), trusted=trusted, model=key.model,
                 draft_model=key.draft_model, sglang_version=key.sglang_version)
        return CanaryResult(True, None, f"recorded {len(prompts)} golden outputs"
                            f" ({'trusted' if trusted else 'untrusted'})", key, prompts,
                            accept_length=accept, recorded=len(prompts), at=self.clock())

    def key(self, prober, context: ServiceContext) -> GoldenKey:
        """The golden key; a version the context lacks is asked of the service (/server_info)."""
        key = self.key_from_context(context)
        if not key.sglang_version:
            info = prober.server_info(prober.deadline_in(5.0)) or {}
            version = info.get("version")
            if isinstance(version, str) and version:
                key = key._replace(sglang_version=version)
        return key

    # ---- stages ----

    def _generate_all(self, prober) -> list[client.Generation]:
        deadline = time.monotonic() + self.config.timeout_s  # one budget for all prompts
        interrupted = getattr(prober, "interrupted", None)  # a stop request ends the run
        return [client.generate(prober.base_url, prompt, self.config.max_new_tokens, deadline, interrupted)
                for prompt in self.prompts]

    def _judge(self, prompt: str, generation: client.Generation,
               golden: dict[str, Any] | None) -> PromptResult:
        common = dict(accept_length=generation.accept_length, elapsed_s=generation.elapsed_s,
                      output_text=generation.text)
        if generation.error:
            return PromptResult(prompt, False, "error", generation.error, **common)
        if golden is None:
            problem, detail = _unusable(generation, self.config.repetition_limit,
                                        loop_limit(self.config)) or (None, "no golden yet")
            tokens = output_tokens(generation.ids, generation.text)[1]
            return PromptResult(prompt, problem is None, problem, detail, tokens=len(tokens), **common)
        found = compare(golden["output_tokens"], golden["output_text"] or "", generation.ids,
                        generation.text, self.config.max_divergent_tokens,
                        self.config.repetition_limit, loop_limit(self.config))
        return PromptResult(prompt, found.problem is None, found.problem, found.describe(),
                            compared_as=found.compared_as, first_divergence=found.first_divergence,
                            divergent=found.divergent, tokens=found.length,
                            golden_tokens=found.golden_length, diff=found.diff, **common)

    def _verdict(self, key: GoldenKey, prompts: list[PromptResult],
                 context: ServiceContext) -> CanaryResult:
        accept = _mean(p.accept_length for p in prompts)
        at = self.clock()
        failed = [(i, p) for i, p in enumerate(prompts, 1) if not p.passed]
        if any(p.problem == "error" for _, p in failed):
            index, prompt = next((i, p) for i, p in failed if p.problem == "error")
            return CanaryResult(False, None, f"canary could not run: prompt {index}: {prompt.detail}",
                                key, tuple(prompts), accept, at=at)
        if failed:
            index, prompt = failed[0]
            detail = f"silent corruption: prompt {index} of {len(prompts)}: {prompt.detail}"
            return CanaryResult(False, SILENT_CORRUPTION, detail, key, tuple(prompts), accept, at=at)
        baseline = self.store.baseline(self.baseline_key(context))
        collapse = self._collapse(accept, baseline, context)
        if collapse:
            return CanaryResult(False, ACCEPTANCE_COLLAPSE, collapse, key, tuple(prompts), accept,
                                baseline, at=at)
        compared = sum(1 for p in prompts if p.compared_as)
        # A first run has nothing to compare with: say so, never "0 of 4 match" (reads as a failure).
        detail = (f"{compared} of {len(prompts)} outputs match their goldens" if compared else
                  f"no goldens yet for these {len(prompts)} prompts") + (
            f", accept length {accept:.2f}" if accept is not None else "")
        return CanaryResult(True, None, detail, key, tuple(prompts), accept, baseline, at=at)

    def _collapse(self, accept: float | None, baseline: float | None,
                  context: ServiceContext) -> str | None:
        """Why acceptance counts as collapsed, or None (no speculation: nothing to collapse)."""
        if accept is None or not context.speculative_algorithm:
            return None
        floor = self.config.collapse_accept_length
        if accept <= floor:
            against = f" vs baseline {baseline:.2f}" if baseline is not None else ""
            return f"acceptance collapsed: accept length {accept:.2f}{against} (at or below {floor:.2f})"
        share = self.config.collapse_baseline_fraction
        if baseline is not None and accept < baseline * share:
            return (f"acceptance collapsed: accept length {accept:.2f} vs baseline {baseline:.2f} "
                    f"(below {share:.0%} of it)")
        return None

    def _learn(self, result: CanaryResult, generations: Sequence[client.Generation],
               context: ServiceContext) -> CanaryResult:
        """A passing run: its new prompts' outputs become (untrusted) goldens; acceptance a sample."""
        prompts, recorded = list(result.prompts), 0
        for index, (prompt, generation) in enumerate(zip(prompts, generations)):
            if prompt.compared_as is None:
                self.store.save_golden(*result.key, prompt.prompt, generation.ids,
                                       generation.text or "", trusted=False)
                prompts[index] = _replace(prompt, recorded=True, detail="recorded as golden")
                recorded += 1
        if result.accept_length is not None and context.speculative_algorithm:
            self.store.add_accept_sample(self.baseline_key(context), result.accept_length)
        detail = result.detail + (f"; recorded {recorded} new golden outputs" if recorded else "")
        return _replace(result, prompts=tuple(prompts), recorded=recorded, detail=detail)


def loop_limit(config: CanaryConfig) -> LoopLimit:
    """The degeneracy test of this config (`degenerate_loop_share`, `degenerate_loop_period`)."""
    return LoopLimit(share=config.degenerate_loop_share, max_period=config.degenerate_loop_period)


def _unusable(generation: client.Generation, repetition_limit: int,
              loop: LoopLimit | None = None) -> tuple[str, str] | None:
    """(problem, detail) when an output can't serve as a golden: no answer, empty, degenerate."""
    if generation.error:
        return "error", generation.error
    tokens = output_tokens(generation.ids, generation.text)[1]
    if not tokens:
        return "empty", "empty output"
    repeated = degenerate_repetition(tokens, repetition_limit)
    if repeated is not None:
        return "repetition", f"degenerate repetition of {str(repeated)!r}"
    looped = degenerate_loop(tokens, loop) if loop is not None else None
    if looped is not None:
        return "repetition", f"degenerate repetition of {' '.join(map(str, looped))!r}"
    return None


def _mean(values) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.fmean(present), 4) if present else None


