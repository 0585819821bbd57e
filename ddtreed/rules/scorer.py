"""A second, generalising layer of evidence: a naive Bayes scorer over the kinds of evidence a
crash carries, for the crashes the rules leave `unknown` or decide only by a last-resort shape rule.

Features (`features`), by kind: the exception types and their families, the message's words with
numbers, hex, paths and shapes stripped (and word bigrams, character shingles), the frame families
and file/module names on the stack, the package of each frame (`package_of`: SGLang's subpackage
or a known library) and the package, file and function words of the innermost frames, the phase
from the service's milestones, the families of the lines printed outside the traceback (and their
words), the crash kind. The model (`ddtreed/data/evidence-scorer.json`) holds integer document
counts per category and feature, the kinds it uses and its calibration (a temperature on the
log-scores), built by `scripts/train_evidence_scorer.py` from the development part of
tests/corpus only; its settings were chosen by cross-validation within that part. Below its
threshold the crash stays what the rules said.

A scorer's verdict is advice: it never carries a remediation (`Verdict.match` has none), so the
daemon does nothing automatic on it; `diagnose --explain` and the incident say it decided and show
the features that weighed most. Pure Python: scoring one crash is a few hundred dictionary look-ups.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..records import Crash, RuleMatch
from .evidence import CrashEvidence
from .loader import RuleError

FORMAT = "ddtreed-evidence-scorer/2"
SCORER_ID = "evidence-scorer"
KINDS = ("exception", "family", "message", "frames", "phase", "lines", "kind",
         "packages", "bigrams", "shingles", "innermost", "functions")
MESSAGE_CHARS = 2000
CONTEXT_LINES = 12
_STOP = frozenset("""the and for with from this that was were are not but has have had its into than then when
which while will would could should can may been being their there they them you your our out any all per via
got use used using set one two see also only more most other some such what where who why how does did
error errors failed failure exception traceback call last most recent line file""".split())
_HEX = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+-]+){2,}/?|[\w.-]+\.(?:py|so|cu|cpp|cc|h|json|safetensors|bin)\b")
_SHAPE = re.compile(r"\[[\d,\s]*\]|\((?:\s*\d+\s*,)+\s*\d*\s*\)|torch\.Size\([^)]*\)")
_NUMBER = re.compile(r"\b\d[\d.,_]*\b")
_WORD = re.compile(r"[a-z][a-z0-9_]{2,40}")
_SHINGLE = 4
INNERMOST = 3
# Top-level packages a stack passes through that name a kind of code (a subsystem of SGLang or a library).
_LIBRARIES = frozenset("""torch triton flashinfer sgl_kernel deep_ep deepep mooncake nixl vllm transformers
safetensors huggingface_hub tokenizers xgrammar outlines aiter vllm_ascend torch_npu zmq uvicorn fastapi
starlette aiohttp requests urllib3 nvshmem cutlass flash_attn tvm_ffi mscclpp apex numpy multiprocessing
asyncio concurrent threading""".split())


class ScorerError(RuleError):
    """The shipped or configured evidence model cannot be used: `file: problem`."""

    def __init__(self, path: str | Path, problem: str):
        super().__init__([f"{path}: {problem}"])


def shipped_path() -> Path:
    return Path(str(resources.files("ddtreed").joinpath("data", "evidence-scorer.json")))


def normalise(text: str) -> str:
    """Text with what varies between reports of one failure stripped: hex, paths, shapes, numbers."""
    text = _HEX.sub(" ", text)
    text = _PATH.sub(" ", text)
    text = _SHAPE.sub(" ", text)
    return _NUMBER.sub(" ", text).lower()


def words(text: str) -> list[str]:
    """Normalised words (snake_case names also split into their parts)."""
    found: list[str] = []
    for word in _WORD.findall(normalise(text[:MESSAGE_CHARS])):
        if word in _STOP:
            continue
        found.append(word)
        if "_" in word:
            found.extend(part for part in word.split("_") if len(part) > 2 and part not in _STOP)
    return found


def package_of(module: str) -> str | None:
    """The kind of code a frame is in: `sglang.<subpackage>` (two levels below `srt`, `layers/moe`
    stays `layers.moe`), or a known library's top-level name; None for a script or unknown code."""
    parts = [part for part in module.replace("\\", "/").split("/") if part]
    if not parts:
        return None
    if "srt" in parts[:-1]:
        below = parts[parts.index("srt") + 1:-1]
        if not below:
            return "sglang." + parts[-1].removesuffix(".py")
        return "sglang." + ".".join(below[:2] if below[0] == "layers" else below[:1])
    if parts[0] == "sglang":
        return "sglang." + (parts[1].removesuffix(".py") if len(parts) > 1 else "")
    head = parts[0].removesuffix(".py").lower()
    if head == "torch" and len(parts) > 2:
        return "torch." + parts[1].lstrip("_")
    return head if head in _LIBRARIES else None


def shingles(text: str) -> set[str]:
    """Character n-grams of the normalised words: the same stem in other inflections and compounds."""
    found: set[str] = set()
    for word in words(text):
        if "_" in word:
            continue  # its parts are words too
        padded = f"<{word}>"
        found.update(padded[i:i + _SHINGLE] for i in range(len(padded) - _SHINGLE + 1))
    return found


def _short(exception: str | None) -> str | None:
    return exception.rsplit(".", 1)[-1] if exception else None


def features(crash: Crash, evidence: CrashEvidence | None, kinds: Iterable[str] = KINDS) -> frozenset[str]:
    """The crash's features, each `kind:value`, for the kinds named."""
    kinds = set(kinds)
    found: set[str] = set()
    chain = [crash, *crash.chained]
    if "exception" in kinds:
        for one in chain:
            for name in (_short(one.exception), _short(one.inner_exception)):
                if name:
                    found.add(f"exc:{name}")
    if "kind" in kinds:
        found.add(f"kind:{crash.kind}")
        if crash.wrapper:
            found.add("wrapper:yes")
    if "message" in kinds:
        for one in chain:
            for text in (one.message, one.inner_message or "", one.wrapper or ""):
                found.update(f"w:{word}" for word in words(text))
    if "frames" in kinds:
        for one in chain:
            for frame in one.frames:
                module = frame.module.replace("\\", "/")
                parts = [part for part in module.split("/")[:-1] if part and not part.startswith(".")]
                stem = module.rsplit("/", 1)[-1].removesuffix(".py")
                if stem:
                    found.add(f"file:{stem.lower()}")
                found.update(f"mod:{part.lower()}" for part in parts[-3:])
    if "lines" in kinds:
        for line in crash.context[-CONTEXT_LINES:]:
            if line.startswith("last milestone: "):
                continue
            found.update(f"ctx:{word}" for word in words(line[:300]))
    if "packages" in kinds:
        for one in chain:
            found.update(f"pkg:{name}" for name in map(package_of, (f.module for f in one.frames)) if name)
    innermost = [frame for one in chain for frame in one.frames[-INNERMOST:]]
    if "innermost" in kinds:
        for frame in innermost:
            module = frame.module.replace("\\", "/")
            name = package_of(module)
            if name:
                found.add(f"ipkg:{name}")
            found.add(f"ifile:{module.rsplit('/', 1)[-1].removesuffix('.py').lower()}")
    if "functions" in kinds:
        for frame in innermost:
            found.update(f"ifn:{part}" for part in frame.function.lower().strip("_").split("_") if len(part) > 2)
    if "bigrams" in kinds or "shingles" in kinds:
        for one in chain:
            for text in (one.message, one.inner_message or ""):
                if "bigrams" in kinds:
                    said = words(text)
                    found.update(f"w2:{a}+{b}" for a, b in zip(said, said[1:]))
                if "shingles" in kinds:
                    found.update(f"c:{gram}" for gram in shingles(text))
    if evidence is not None:
        if "family" in kinds:
            found.update(f"excfam:{name}" for name in evidence.exception_families)
            found.update(f"msgfam:{name}" for name in evidence.message_families)
            found.update(f"framefam:{name}" for name in evidence.frame_families)
        if "lines" in kinds:
            found.update(f"linefam:{item.family}" for item in evidence.items if item.kind == "line")
        if "phase" in kinds and evidence.phase:
            found.add(f"phase:{evidence.phase}")
    return frozenset(found)


@dataclass(frozen=True)
class Verdict:
    """The scorer's reading of one crash: a category, its posterior, the features that weighed most."""

    category: str
    confidence: float
    top_features: tuple[tuple[str, float], ...]  # (feature, log-odds for the category over the runner-up)
    runner_up: str | None
    threshold: float

    @property
    def decides(self) -> bool:
        return self.confidence >= self.threshold

    def evidence_line(self) -> str:
        return ", ".join(f"{name} ({weight:+.1f})" for name, weight in self.top_features)

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "confidence": self.confidence, "threshold": self.threshold,
                "runner_up": self.runner_up, "advisory": True,
                "top_features": [{"feature": name, "weight": round(weight, 2)} for name, weight in self.top_features]}

    def match(self, replaced: RuleMatch) -> RuleMatch:
        """The diagnosis the verdict gives: its category and evidence, advice only (no remediation).

        The rule id of what it replaced is kept (empty for unknown), so the engine's own fallbacks,
        which key off rule ids and priorities, run exactly as without the scorer."""
        before = f"rule {replaced.rule_id} knew only its shape" if replaced.rule_id else "no rule matched"
        return RuleMatch(
            rule_id=replaced.rule_id, category=self.category,
            title=f"Evidence scorer: looks like {self.category} (advisory)",
            diagnosis=(f"{before}; the evidence scorer reads it as {self.category} "
                       f"(confidence {self.confidence:.2f}, trained on the development corpus; evidence: "
                       f"{self.evidence_line()}). {replaced.diagnosis}")[:1000],
            remediations=(), params={k: v for k, v in replaced.params.items() if k != "holder_pid"},
            advice=("Advisory only: no automatic remediation is taken on the scorer's reading. Check it "
                    "against the error above; if it is right, a rule for this wording (ddtreed/data/rules) "
                    "makes it decisive."),
            references=replaced.references, precise=False)


class Scorer:
    """Multinomial naive Bayes over binary features, from integer counts (the JSON model)."""

    def __init__(self, model: Mapping[str, Any], source: str = "<model>"):
        self.source = source
        if model.get("format") != FORMAT:
            raise ScorerError(source, f"not a valid evidence model: format {model.get('format')!r}, want {FORMAT!r}")
        try:
            self.alpha = float(model["alpha"])
            self.threshold = float(model["threshold"])
            # Calibration: the posterior is softmax(log-score / temperature), the temperature that
            # minimised the held-out log-loss (naive Bayes counts correlated features as independent).
            self.temperature = float(model["temperature"])
            # Where no rule matched at all, naming the catch-all `other` in place of `unknown` asserts
            # no failure class and carries no remediation: it has its own (cross-validated) bar.
            self.other_threshold = float(model["other_threshold"])
            self.kinds = tuple(model["feature_kinds"])
            docs: dict[str, int] = {str(k): int(v) for k, v in model["class_docs"].items()}
            counts: dict[str, dict[str, int]] = {str(c): {str(f): int(n) for f, n in row.items()}
                                                 for c, row in model["counts"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ScorerError(source, f"not a valid evidence model: {type(error).__name__}: {error}") from None
        if not docs or set(docs) != set(counts) or not 0.0 < self.alpha or not 0.0 <= self.threshold <= 1.0 \
                or not 0.0 < self.temperature or not 0.0 <= self.other_threshold <= 1.0:
            raise ScorerError(source, "not a valid evidence model: classes, alpha, threshold or temperature "
                                      "out of range")
        unknown_kinds = set(self.kinds) - set(KINDS)
        if unknown_kinds:
            raise ScorerError(source, f"not a valid evidence model: unknown feature kinds {sorted(unknown_kinds)}")
        self.classes = tuple(sorted(docs))
        # Compact (the daemon holds it for its lifetime): one dict, feature -> the classes it occurs
        # in and its document count in each, packed 3 bytes a class (index, count as 2 bytes).
        if len(self.classes) > 255 or any(not 0 < n < 65536 for row in counts.values() for n in row.values()):
            raise ScorerError(source, "not a valid evidence model: too many classes or a count out of range")
        index = {c: i for i, c in enumerate(self.classes)}
        packed: dict[str, bytearray] = {}
        for c in self.classes:
            for f, n in counts[c].items():
                packed.setdefault(f, bytearray()).extend((index[c], n & 0xFF, n >> 8))
        self._packed: dict[str, bytes] = {f: bytes(v) for f, v in packed.items()}
        largest = max((n for row in counts.values() for n in row.values()), default=0)
        self._bonus = tuple(math.log((n + self.alpha) / self.alpha) for n in range(largest + 1))
        total_docs = sum(docs.values())
        self._prior = tuple(math.log(docs[c] / total_docs) for c in self.classes)
        self._log_default = tuple(math.log(self.alpha / (sum(counts[c].values()) + self.alpha * len(packed)))
                                  for c in self.classes)
        # The kinds of crash it was trained on (a canary's or a health probe's failure is none).
        self.crash_kinds = frozenset(f[len("kind:"):] for f in packed if f.startswith("kind:"))

    def _counts(self, feature: str) -> dict[int, int]:
        """Class index -> document count of `feature` (absent classes: none)."""
        data = self._packed[feature]
        return {data[k]: data[k + 1] | data[k + 2] << 8 for k in range(0, len(data), 3)}

    def _log_p(self, feature: str, i: int) -> float:
        return self._log_default[i] + self._bonus[self._counts(feature).get(i, 0)]

    @staticmethod
    def replaces(rule_category: str | None, verdict: Verdict) -> bool:
        """Whether `verdict` takes the place of what the rules said: no rule (`None`) or a
        last-resort rule's `rule_category`. It never turns a rule's reading into `other`."""
        if not verdict.decides or verdict.category == (rule_category or "unknown"):
            return False
        return rule_category is None or verdict.category != "other"

    def log_scores(self, found: Iterable[str]) -> dict[str, float]:
        """Each class's log prior plus the log likelihood of the known features (uncalibrated)."""
        known = [f for f in set(found) if f in self._packed]
        totals = [prior + len(known) * default for prior, default in zip(self._prior, self._log_default)]
        for f in known:
            for i, n in self._counts(f).items():
                totals[i] += self._bonus[n]
        return dict(zip(self.classes, totals))

    def score(self, found: Iterable[str]) -> Verdict:
        known = sorted(f for f in set(found) if f in self._packed)
        totals = self.log_scores(known)
        ranked = sorted(self.classes, key=lambda c: (-totals[c], c))
        top = totals[ranked[0]]
        norm = sum(math.exp((totals[c] - top) / self.temperature) for c in self.classes)
        best = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        weights = []
        if runner is not None:
            b, r = self.classes.index(best), self.classes.index(runner)
            for f in known:
                weight = (self._log_p(f, b) - self._log_p(f, r)) / self.temperature
                if weight > 0:
                    weights.append((f, weight))
        weights.sort(key=lambda pair: (-pair[1], pair[0]))
        return Verdict(category=best, confidence=round(1.0 / norm, 4), top_features=tuple(weights[:6]),
                       runner_up=runner, threshold=self.other_threshold if best == "other" else self.threshold)

    def verdict(self, crash: Crash, evidence: CrashEvidence | None) -> Verdict | None:
        """The reading of one crash; None for a kind of crash the model never saw."""
        if self.crash_kinds and crash.kind not in self.crash_kinds:
            return None
        return self.score(features(crash, evidence, self.kinds))


def load_scorer(path: str | Path | None = None) -> Scorer:
    """The evidence model at `path` (default: the shipped one); ScorerError naming the file when unusable."""
    path = Path(path) if path is not None else shipped_path()
    return _load(str(path))


@lru_cache(maxsize=4)
def _load(path: str) -> Scorer:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ScorerError(path, f"cannot read the evidence model: {error.strerror or error}") from None
    try:
        model = json.loads(text)
    except ValueError as error:
        raise ScorerError(path, f"not valid JSON: {error}") from None
    if not isinstance(model, dict):
        raise ScorerError(path, "not a valid evidence model: the top level is not an object")
    return Scorer(model, path)
