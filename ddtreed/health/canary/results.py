"""What one canary run found, how it is stored, and the crash a failed run becomes for the rules."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

from ...records import Crash

SILENT_CORRUPTION = "silent-corruption"
ACCEPTANCE_COLLAPSE = "acceptance-collapse"


class GoldenKey(NamedTuple):
    """Goldens belong to one (model, draft model, sglang version): "" where a part is unknown."""

    model: str
    draft_model: str
    sglang_version: str


@dataclass(frozen=True)
class PromptResult:
    prompt: str
    passed: bool
    problem: str | None = None  # "error" | "empty" | "diverged" | "repetition"
    detail: str = ""
    accept_length: float | None = None  # meta_info.spec_accept_length of this request
    elapsed_s: float = 0.0
    compared_as: str | None = None  # "ids" | "words"; None when there was no golden to compare
    first_divergence: int | None = None  # 0-based token position
    divergent: int = 0
    tokens: int = 0  # output length in the compared unit
    golden_tokens: int = 0
    diff: tuple[str, ...] = ()
    output_text: str | None = None
    output_ids: tuple[int, ...] = ()  # the whole answer, so a stored run is evidence on its own
    recorded: bool = False  # this output became the golden (first healthy run)


@dataclass(frozen=True)
class CanaryResult:
    """`passed`; else `category` names the failure (None: the canary could not run at all)."""

    passed: bool
    category: str | None
    detail: str
    key: GoldenKey
    prompts: tuple[PromptResult, ...] = ()
    accept_length: float | None = None  # mean over the prompts that reported one
    baseline: float | None = None  # the learned acceptance baseline it was held against
    recorded: int = 0  # goldens recorded by this run
    at: float = 0.0
    stage: str = "canary"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def first_failure(self) -> PromptResult | None:
        return next((prompt for prompt in self.prompts if not prompt.passed), None)

    @property
    def first_divergence(self) -> PromptResult | None:
        return next((p for p in self.prompts if p.first_divergence is not None), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; stored as the canary run's `data` and printed by `canary status --json`."""
        data = asdict(self)
        data["key"] = self.key._asdict()
        return data


def result_from_dict(data: dict[str, Any]) -> CanaryResult:
    """The inverse of `to_dict` (for `canary status` reading a stored run). Keys this version does
    not know (a run stored by a newer ddtreed) are left out, never an error."""
    prompt_fields = {f.name for f in fields(PromptResult)}
    prompts = tuple(PromptResult(**{**{k: v for k, v in p.items() if k in prompt_fields},
                                    "diff": tuple(p.get("diff") or ()),
                                    "output_ids": tuple(p.get("output_ids") or ())})
                    for p in data.get("prompts") or ())
    known = {f.name for f in fields(CanaryResult)} - {"key", "prompts"}
    rest = {k: v for k, v in data.items() if k in known}
    return CanaryResult(**{**rest, "key": GoldenKey(**data["key"]), "prompts": prompts})


def canary_crash(result: CanaryResult) -> Crash:
    """A failed run as a Crash of kind "canary"; rules/canary.toml diagnoses it."""
    if result.passed:
        raise ValueError("canary_crash needs a failed canary result")
    failure = result.first_failure
    lines = [f"prompt {result.prompts.index(p) + 1}: {p.prompt!r}: {p.detail}"
             for p in result.prompts if not p.passed]
    if failure is not None:
        lines += list(failure.diff)
    return Crash(kind="canary", exception=None, message=_message(result), source="canary",
                 detected_at=result.at, excerpt=tuple(lines), context=(result.detail,))


def _message(result: CanaryResult) -> str:
    # Numbers only where they vary: the signature normalises them, so one fingerprint per shape.
    failure = result.first_failure
    where = ""
    if failure is not None:
        where = f" (prompt {result.prompts.index(failure) + 1} of {len(result.prompts)})"
    if result.category == ACCEPTANCE_COLLAPSE:
        accept = f"{result.accept_length:.2f}" if result.accept_length is not None else "unknown"
        if result.baseline is not None:
            return f"canary: acceptance length {accept} vs baseline {result.baseline:.2f}"
        return f"canary: acceptance length {accept} at or below the collapse floor"
    if result.category is None or failure is None:
        return f"canary: no answer: {result.detail}"
    if failure.problem == "diverged":
        return (f"canary: output diverged at token {failure.first_divergence + 1} of "
                f"{failure.golden_tokens}{where}")
    if failure.problem == "empty":
        return f"canary: empty output{where}"
    return f"canary: degenerate repetition{where}"
