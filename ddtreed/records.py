"""The typed, frozen records that pass between pipeline stages. Imports nothing of ours."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .vocabulary import (  # re-exported: the vocabulary is part of the records' API
    CATEGORIES as CATEGORIES,
    POLICIES as POLICIES,
    CrashKind as CrashKind,
    CRASH_KINDS as CRASH_KINDS,
    IncidentStatus as IncidentStatus,
    INCIDENT_STATUSES as INCIDENT_STATUSES,
    Step as Step,
    STEPS as STEPS,
    ApplicationStatus as ApplicationStatus,
    APPLICATION_STATUSES as APPLICATION_STATUSES,
    IN_PLACE as IN_PLACE,
    APPLICATION_STATUSES_SHOWN as APPLICATION_STATUSES_SHOWN,
    counts_summary as counts_summary,
    DaemonState as DaemonState,
    DAEMON_STATES as DAEMON_STATES,
    checked as checked,
)


@dataclass(frozen=True)
class ServiceContext:
    """Facts about the supervised service that rules and remediations reason with."""

    argv: tuple[str, ...] = ()
    speculative_algorithm: str | None = None  # upper-case: DDTREE, DFLASH, EAGLE, ...
    block_size: int | None = None  # DFlash block / num draft tokens (resolved)
    block_size_source: str | None = None  # "flag", "draft-config", "default"
    ddtree_budget: int | None = None  # resolved (default block_size - 1)
    ddtree_options: Mapping[str, str] = field(default_factory=dict)  # other --speculative-ddtree-*
    num_draft_tokens: int | None = None
    draft_model_path: str | None = None
    model_path: str | None = None
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    attention_backend: str | None = None
    mem_fraction_static: float | None = None
    page_size: int | None = None
    sglang_version: str | None = None
    site_packages: str | None = None  # directory holding the service's `sglang/` package
    flags: Mapping[str, str | bool] = field(default_factory=dict)  # every --flag seen, normalised

    def variables(self) -> dict[str, Any]:
        """Names a rule's `when` expression may use."""
        return {
            "speculative_algorithm": self.speculative_algorithm,
            "block_size": self.block_size,
            "ddtree_budget": self.ddtree_budget,
            "num_draft_tokens": self.num_draft_tokens,
            "tp_size": self.tp_size,
            "dp_size": self.dp_size,
            "pp_size": self.pp_size,
            "port": self.port,
            "disable_cuda_graph": self.disable_cuda_graph,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "max_running_requests": self.max_running_requests,
            "attention_backend": self.attention_backend,
            "mem_fraction_static": self.mem_fraction_static,
            "page_size": self.page_size,
            "sglang_version": self.sglang_version,
        }


@dataclass(frozen=True)
class LogChunk:
    """A batch of complete lines from one source: the unit the follower hands downstream.

    Batches, not one object per line, keep the pipeline near the speed of a plain line loop.
    """

    source: str
    first_number: int  # line number of lines[0]
    lines: tuple[str, ...]  # decoded, without newlines, each capped in length
    received_at: float
    text: str | None = None  # "\n".join(lines) when the producer had it: spares consumers a join


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    @property
    def module(self) -> str:
        """`sglang/srt/managers/scheduler.py` style path from the first package marker."""
        for marker in ("/site-packages/", "/dist-packages/", "/python/"):
            if marker in self.file:
                return self.file.rsplit(marker, 1)[1]
        if self.file.startswith((".../", "\u2026/")):  # a paste that elided the installation's prefix
            return self.file.split("/", 1)[1]  # (`.../sglang/srt/…`): the rest is package-relative
        return self.file


@dataclass(frozen=True)
class Crash:
    """One failure as one process (rank) reported it."""

    kind: str  # one of CRASH_KINDS
    exception: str | None  # e.g. "RuntimeError", "torch.AcceleratorError"
    message: str  # final exception message (first line kept intact, continuation lines joined)
    frames: tuple[Frame, ...] = ()
    rank: str | None = None  # "TP3", "DP0 TP3", None for untagged
    prefix: str | None = None  # "Scheduler hit an exception", "DetokenizerManager hit an exception"
    wrapper: str | None = None  # "Capture cuda graph failed" when the message wraps an inner error
    inner_exception: str | None = None  # exception type named inside a wrapper message
    inner_message: str | None = None
    chained: tuple["Crash", ...] = ()  # causes printed before this one ("During handling...")
    exit_code: int | None = None  # for child deaths / killed main process
    source: str = ""
    first_line: int = 0
    last_line: int = 0
    detected_at: float = 0.0
    excerpt: tuple[str, ...] = ()  # the raw lines, capped
    context: tuple[str, ...] = ()  # lines that explain it: warnings before it, SIGQUIT, assert samples
    device_asserts: int = 0  # per-thread device-side assertion lines seen with it (samples in context)

    def __post_init__(self) -> None:
        checked(self.kind, CRASH_KINDS, "crash kind")


@dataclass(frozen=True)
class Signature:
    fingerprint: str  # short stable hash
    exception: str | None
    normalized_message: str  # numbers -> <n>, hex -> <hex>, paths shortened
    frames: tuple[str, ...]  # in-app frames as "module:function"
    params: Mapping[str, Any] = field(default_factory=dict)  # n0, n1, ... plus named values
    hints: tuple[str, ...] = ()  # each normalisation step, for --explain


@dataclass(frozen=True)
class RuleMatch:
    rule_id: str
    category: str
    title: str
    diagnosis: str  # rendered with the params and context
    remediations: tuple[str, ...]  # ordered remediation ids to try
    params: Mapping[str, Any] = field(default_factory=dict)
    advice: str = ""
    references: tuple[str, ...] = ()
    precise: bool = False  # True when context predicates matched (not only the class)


@dataclass(frozen=True)
class Explanation:
    """Why a rule did or did not match one signature (for --explain and `rules test`)."""

    rule_id: str
    matched: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class FileChange:
    """One file a remediation changed, enough to verify and undo it."""

    path: str
    before_sha256: str | None  # None: the file did not exist
    after_sha256: str | None  # None: the file was removed
    backup_path: str | None


@dataclass(frozen=True)
class LaunchChange:
    """A change to the service's argv/env made by an args/env remediation."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    description: str


@dataclass(frozen=True)
class Application:
    """A remediation as applied: how to show it and how to undo it."""

    application_id: str
    remediation_id: str
    kind: str  # "patch" | "args" | "env"
    target: str  # site-packages dir, or "launch"
    summary: str
    files: tuple[FileChange, ...] = ()
    launch: LaunchChange | None = None
    applied_at: float = 0.0


@dataclass(frozen=True)
class Milestone:
    name: str  # "weights-loading", "weights-loaded", "kv-cache", "graph-capture", "graphs-captured", "ready"
    text: str
    at: float


@dataclass(frozen=True)
class HealthResult:
    ok: bool
    stage: str  # "startup", "health", "generate", "acceptance", "window", "canary"
    detail: str
    accept_length: float | None = None
    output_text: str | None = None
    elapsed_s: float = 0.0
    completion_tokens: int | None = None  # meta_info.completion_tokens of a /generate probe


@dataclass(frozen=True)
class Verdict:
    """What verification concluded about one (re)start: the typed result of `ddtreed.health.verify`."""

    ok: bool
    detail: str
    crashes: tuple[Crash, ...] = ()
    exit_status: "ExitStatus | None" = None
    accept_length: float | None = None
    stage: str = ""  # the stage that decided: startup, health, generate, acceptance, window, canary


@dataclass(frozen=True)
class Outcome:
    """Event: the loop concluded one incident (emitted before any relaunch that follows it)."""

    incident_id: int
    status: str  # an IncidentStatus


@dataclass(frozen=True)
class Healthy:
    """Event: the service passed verification after a (re)start and is being watched."""

    verdict: Verdict


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended, decoded once."""

    code: int | None  # exit code, or None when killed by a signal
    signal: int | None

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exited with code {self.code}"
