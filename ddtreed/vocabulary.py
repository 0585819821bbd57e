"""The closed vocabularies the stages share (categories, policies, crash kinds, incident and
application statuses, steps, daemon states), `checked` and `counts_summary`: no dataclass, so
`ddtreed status` and the stdlib readers import these without the records (16 dataclasses, ~15 ms
of a CLI start on this box). `ddtreed.records` re-exports every name; import from there unless
the start time of a command matters. Imports nothing of ours."""

from __future__ import annotations

from typing import Any, Literal, Mapping, get_args

# Categories every script may rely on (README "Taxonomy"); rules may add more.
CATEGORIES = (
    "cuda-graph-shape-mismatch",
    "cuda-graph-capture-failed",
    "cuda-oom",
    "kv-pool-too-small",
    "illegal-memory-access",
    "nccl-error",
    "scheduler-watchdog-timeout",
    "port-in-use",
    "no-gpu",
    "kernel-compile-error",
    "unsupported-config",
    "model-load-error",
    "kv-cache-leak",
    "silent-corruption",
    "acceptance-collapse",
    "missing-dependency",
    "fatal-signal",
    "gpu-hardware-fault",
    "other",
    "unknown",
)

POLICIES = ("auto", "advise", "off")

# The closed vocabularies. Each is a Literal (for mypy) and the tuple of its values (checked at
# write by `checked`): a misspelt word fails where it is written, not in a report weeks later.

CrashKind = Literal[
    "traceback",         # a complete Python traceback in the service's logs
    "child-death",       # SGLang's "child process ... died" line
    "watchdog-timeout",  # the scheduler watchdog fired
    "killed",            # the service ended without any traceback
    "nccl-watchdog",     # the NCCL watchdog's collective timeout
    "error-line",        # a fatal line outside any traceback (bind error, fatal signal, HSA, Xid, usage)
    "canary",            # a failed output canary (ddtreed/health/canary), no traceback
    "probe-failed",      # a health/generate probe failed, no traceback
    "serving",           # the serving watch (ddtreed/health/serving.py): hung, eager fallback, collapse
]
CRASH_KINDS: tuple[str, ...] = get_args(CrashKind)

IncidentStatus = Literal["open", "resolved", "reverted", "escalated", "prevented", "advised", "observed",
                         "interrupted"]  # ddtreed stopped before it closed and no fix of it was applied
INCIDENT_STATUSES: tuple[str, ...] = get_args(IncidentStatus)

# Every step the daemon writes into an incident's timeline, in the order a crash travels.
Step = Literal[
    "detected", "diagnosed", "advised", "skipped", "applied", "apply-failed", "restarting",
    "restarted", "healthy", "failed", "verified", "reverted", "revert-failed", "recurred",
    "not-remediated", "escalated", "reconciled", "observed",
    "waiting",  # blocked on something outside the service (another process holding the GPU)
    "cleared",  # what blocked the launch is gone (a preflight finding, the GPU's other holder)
    "notified", "notify-failed",  # a hook delivery (ddtreed.ops.notify.Hooks), recorded by the loop
]
STEPS: tuple[str, ...] = get_args(Step)

ApplicationStatus = Literal["applied", "verified", "reverted", "undone-externally", "overwritten"]
APPLICATION_STATUSES: tuple[str, ...] = get_args(ApplicationStatus)
IN_PLACE: tuple[str, ...] = ("applied", "verified")  # the application's change is (meant to be) live
APPLICATION_STATUSES_SHOWN = ("applied", "reverted", "verified")  # ddtreed's own: always listed, zeros too


def counts_summary(incidents: list[dict[str, Any]], applied: Mapping[str, int], frozen: int) -> dict[str, Any]:
    """The counts that `status`, a metrics scrape and `fleet status` show, from the store's
    `incident_counts` rows, the applications per status and the frozen signatures: one shape for
    the store, the stdlib reader of `status` and the remote reader of `fleet status`."""
    return {
        "incidents": incidents,
        "incidents_total": sum(row["count"] for row in incidents),
        "open_incidents": sum(row["count"] for row in incidents if row["status"] == "open"),
        # a change undone from outside is listed only when seen
        "applications": {**{status: applied.get(status, 0) for status in APPLICATION_STATUSES_SHOWN},
                         **{status: count for status, count in applied.items() if status in APPLICATION_STATUSES}},
        "frozen_signatures": frozen,
    }

DaemonState = Literal[
    "starting",      # ddtreed itself is starting (config, rules, journal replay)
    "preflight",     # checking the launch before the first start
    "running",       # the service is up (or loading) and being watched
    "crashed",       # the service died; its logs are being settled
    "diagnosing",    # matching the crash against the rules
    "remediating",   # applying (or advising) a fix
    "restarting",    # stopping what is left and relaunching
    "verifying",     # startup milestones, probes and the verification window
    "backoff",       # waiting before the next restart
    "escalated",     # ddtreed gave up on this problem: a person must look
    "blocked",       # preflight found a certain crash the config says must block the launch
    "stopping",      # ddtreed is shutting down: stopping the service, then itself
    "stopped",       # ddtreed exited cleanly
    "gave-up",       # the restart budget was spent: ddtreed stopped the service and exited (75)
]
DAEMON_STATES: tuple[str, ...] = get_args(DaemonState)


def checked(value: str, allowed: tuple[str, ...], what: str) -> str:
    """`value` when it is one of `allowed`; ValueError naming the vocabulary otherwise."""
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value
