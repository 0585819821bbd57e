"""Golden outputs and the canary check: greedy prompts compared token by token, acceptance watched."""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import replace as _replace
from typing import Any, Callable, Sequence

import structlog

from ...config import CanaryConfig
from ...records import ServiceContext
from . import client
from .compare import (LoopLimit, best_comparison, compare, degenerate_loop, degenerate_repetition,
                      output_tokens)
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


# Drafts made from the tokens the server has already seen (its own history), not by a draft model:
# the canary's repeated prompts are in that history, so its acceptance is not comparable from run
# to run (real 0.5.16 NGRAM: 2.20 on a cold server, 10.67 on the same server a second later).
HISTORY_DRAFTED = frozenset({"NGRAM", "LOOKAHEAD"})

VARIANT_SEPARATOR = -1  # between golden variants in one stored row (no token id is negative)


class CanaryError(RuntimeError):
    """Goldens could not be recorded (the service did not answer, or answered degenerately)."""


def golden_key(context: ServiceContext) -> GoldenKey:
    """(model, draft model, sglang version) of the service: what a golden output belongs to."""
    return GoldenKey(context.model_path or "", context.draft_model_path or "",
                     context.sglang_version or "")


def canary_baseline_key(context: ServiceContext) -> str:
    """The canary's own acceptance baseline: its prompts, its length, apart from the probe's.

    The verifier's 16-token probe and the serving traffic measure other text (real 0.5.16 NGRAM:
    probe 1.14, canary 2.20 on the same server), so one baseline for both compares unlike things."""
    from ..verify import baseline_key as verifier_key

    return "canary:" + verifier_key(context)


def judges_acceptance(context: ServiceContext) -> bool:
    """Speculative decoding with a draft model: the canary's acceptance is comparable run to run."""
    algorithm = (context.speculative_algorithm or "").upper()
    return bool(algorithm) and algorithm not in HISTORY_DRAFTED


def golden_variants(row: dict[str, Any]) -> list[list[int]]:
    """Every recorded variant of one golden row (older rows hold exactly one)."""
    variants: list[list[int]] = [[]]
    for token in row.get("output_tokens") or []:
        if token == VARIANT_SEPARATOR:
            variants.append([])
        else:
            variants[-1].append(token)
    return [variant for variant in variants if variant] or [[]]


def pack_variants(variants: Sequence[Sequence[int]]) -> list[int]:
    packed: list[int] = []
    for index, variant in enumerate(variants):
        packed += ([VARIANT_SEPARATOR] if index else []) + list(variant)
    return packed


def distinct(generations: Sequence[client.Generation]) -> list[list[int]]:
    """The distinct token-id outputs, first seen first."""
    found: list[list[int]] = []
    for generation in generations:
        if generation.ids and generation.ids not in found:
            found.append(list(generation.ids))
    return found


def validate(config: CanaryConfig) -> None:
    """One ValueError naming the key when a [canary] value cannot work."""
    checks = {"max_new_tokens": config.max_new_tokens > 0, "timeout_s": config.timeout_s > 0,
              "max_divergent_tokens": config.max_divergent_tokens >= 0,
              "interval_s": config.interval_s >= 0, "busy_requests": config.busy_requests > 0,
              "collapse_baseline_fraction": 0 <= config.collapse_baseline_fraction <= 1,
              "degenerate_loop_share": 0 <= config.degenerate_loop_share <= 1,
              "degenerate_loop_period": config.degenerate_loop_period >= 1,
              "agree_tokens": config.agree_tokens >= 0, "golden_samples": config.golden_samples >= 1}
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
            baseline_key = canary_baseline_key
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
            result = self._learn(prober, result, generations, context)
        self.store.record_canary_run(*key, passed=result.passed, detail=result.detail,
                                     accept_length=result.accept_length, data=result.to_dict(),
                                     at=result.at)
        event = log.info if result.passed else log.warning
        event("canary.checked", passed=result.passed, category=result.category,
              detail=result.detail, accept_length=result.accept_length, model=key.model)
        return result

    def record(self, prober, context: ServiceContext, trusted: bool = True) -> CanaryResult:
        """Replace this key's goldens with the service's current outputs (all or nothing).

        Each prompt is sent `golden_samples` times; every distinct output is kept as a variant."""
        key = self.key(prober, context)
        samples = [self._generate_all(prober) for _ in range(self.config.golden_samples)]
        for run in samples:
            for index, (prompt, generation) in enumerate(zip(self.prompts, run), 1):
                problem = _unusable(generation, self.config.repetition_limit, loop_limit(self.config))
                if problem:
                    raise CanaryError(f"prompt {index} ({prompt[:40]!r}): {problem[1]}; "
                                      "no goldens recorded")
        generations = samples[0]
        self.store.delete_goldens(*key)
        for index, (prompt, generation) in enumerate(zip(self.prompts, generations)):
            variants = distinct([run[index] for run in samples])
            self.store.save_golden(*key, prompt, pack_variants(variants), generation.text or "",
                                   trusted=trusted)
        prompts = tuple(PromptResult(prompt, True, detail=_recorded_detail(
                            distinct([run[index] for run in samples]), self.config.golden_samples),
                                     recorded=True, accept_length=g.accept_length,
                                     elapsed_s=g.elapsed_s, output_text=g.text,
                                     output_ids=tuple(g.ids),
                                     tokens=len(output_tokens(g.ids, g.text)[1]))
                        for index, (prompt, g) in enumerate(zip(self.prompts, generations)))
        accept = _mean(g.accept_length for g in generations)
        if accept is not None and judges_acceptance(context) and \
                accept > self.config.collapse_accept_length:
            self.store.add_accept_sample(self.baseline_key(context), accept)
        log.info("canary.recorded", goldens=len(prompts), trusted=trusted, model=key.model,
                 draft_model=key.draft_model, sglang_version=key.sglang_version,
                 samples=self.config.golden_samples)
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

    def _generate_all(self, prober, prompts: Sequence[str] | None = None) -> list[client.Generation]:
        deadline = time.monotonic() + self.config.timeout_s  # one budget for all prompts
        interrupted = getattr(prober, "interrupted", None)  # a stop request ends the run
        return [client.generate(prober.base_url, prompt, self.config.max_new_tokens, deadline,
                                interrupted, self._namespace())
                for prompt in (self.prompts if prompts is None else prompts)]

    def _namespace(self) -> str | None:
        """A prefix-cache namespace of its own for one request (`isolate_cache`), else None."""
        return f"ddtreed-canary-{uuid.uuid4().hex}" if self.config.isolate_cache else None

    def _judge(self, prompt: str, generation: client.Generation,
               golden: dict[str, Any] | None) -> PromptResult:
        common = dict(accept_length=generation.accept_length, elapsed_s=generation.elapsed_s,
                      output_text=generation.text, output_ids=tuple(generation.ids))
        if generation.error:
            return PromptResult(prompt, False, "error", generation.error, **common)
        if golden is None:
            problem, detail = _unusable(generation, self.config.repetition_limit,
                                        loop_limit(self.config)) or (None, "no golden yet")
            tokens = output_tokens(generation.ids, generation.text)[1]
            return PromptResult(prompt, problem is None, problem, detail, tokens=len(tokens), **common)
        found = best_comparison([
            compare(variant, golden["output_text"] or "", generation.ids, generation.text,
                    self.config.max_divergent_tokens, self.config.repetition_limit,
                    loop_limit(self.config), self.config.agree_tokens)
            for variant in golden_variants(golden)])
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
        varied = sum(1 for p in prompts if p.compared_as and p.first_divergence is not None)
        # A first run has nothing to compare with: say so, never "0 of 4 match" (reads as a failure).
        detail = (f"{compared} of {len(prompts)} outputs match their goldens" if compared else
                  f"no goldens yet for these {len(prompts)} prompts") + (
            f" ({varied} past the first {self.config.agree_tokens} tokens only)" if varied else "") + (
            f", accept length {accept:.2f}" if accept is not None else "") + (
            f" (not judged: {context.speculative_algorithm} drafts from served history)"
            if accept is not None and context.speculative_algorithm
            and not judges_acceptance(context) else "")
        return CanaryResult(True, None, detail, key, tuple(prompts), accept, baseline, at=at)

    def _collapse(self, accept: float | None, baseline: float | None,
                  context: ServiceContext) -> str | None:
        """Why acceptance counts as collapsed, or None (no speculation: nothing to collapse; drafts
        from the server's history, as NGRAM's: not comparable from run to run)."""
        if accept is None or not judges_acceptance(context):
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

    def _learn(self, prober, result: CanaryResult, generations: Sequence[client.Generation],
               context: ServiceContext) -> CanaryResult:
        """A passing run: its new prompts' outputs become (untrusted) goldens, each prompt sent
        `golden_samples` times in all; acceptance becomes a sample of the canary's baseline."""
        prompts, recorded = list(result.prompts), 0
        new = [index for index, prompt in enumerate(prompts) if prompt.compared_as is None]
        extra = [self._generate_all(prober, [prompts[i].prompt for i in new])
                 for _ in range(self.config.golden_samples - 1)] if new else []
        for column, index in enumerate(new):
            prompt, generation = prompts[index], generations[index]
            samples = [generation] + [run[column] for run in extra]
            unusable = next((problem for problem in (_unusable(sample, self.config.repetition_limit,
                                                              loop_limit(self.config))
                                                     for sample in samples[1:]) if problem), None)
            if unusable:  # a later sample failed: record nothing for it, try again next run
                prompts[index] = _replace(prompt, detail=f"not recorded: a repeat gave {unusable[1]}")
                continue
            variants = distinct(samples) or [list(generation.ids)]
            self.store.save_golden(*result.key, prompt.prompt, pack_variants(variants),
                                   generation.text or "", trusted=False)
            prompts[index] = _replace(prompt, recorded=True, detail="recorded as golden" + (
                f" ({len(variants)} variants in {len(samples)} runs)" if len(variants) > 1 else ""))
            recorded += 1
        if result.accept_length is not None and judges_acceptance(context):
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


def _recorded_detail(variants: Sequence[Sequence[int]], samples: int) -> str:
    return "recorded" + (f" ({len(variants)} variants in {samples} runs)" if len(variants) > 1 else "")


def _mean(values) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.fmean(present), 4) if present else None


