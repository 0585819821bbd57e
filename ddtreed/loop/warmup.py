"""The diagnosis path run once on a built-in synthetic crash, before the daemon's first real one.

A daemon's first crash used to pay for first use on its critical path (the crash line read →
the incident row committed): RE2 builds the DFA states of the catch-all message patterns that
every crash meets (one state per character of a counted repeat such as `[^\\n]{1,200}`), the
frame patterns of SGLang's scheduler compile on their first search, the evidence scorer reads
its first crash, the encoders of the incident row run for the first time. `DiagnosisWarmUp`
does that work once per rule set (at start, again after a SIGHUP brought new rules) on
`SYNTHETIC_LINES`, assembled by a real `Assembler` and diagnosed by the real `RuleSet.diagnose`
with the daemon's context, at a moment the loop has nothing else to do: the service launched and
its logs read at least once, no traceback being assembled, the daemon `starting` (SGLang loads
for minutes) or `running`. It never runs before the launch or the first log read, and never on
the crash path.

What it must not do, and does not: write. No incident, step, status or log line of the service
is written; the store is not touched. What it keeps is what the first diagnosis would have kept
anyway (RE2's automata of the patterns it searched, ~0.1 MB); the patterns specific to a kind
of crash still compile when that kind first happens (compiling them all would keep megabytes of
RE2 programs resident, the reason the lazy compile exists: docs/performance.md, perfrss).

After a warm-up the daemon's heap is frozen (`freeze_heap`: one full collection, then
`gc.freeze()`), so that the cyclic collector's full (generation-2) pass, which walks every tracked
object (~30 k after start: 12 – 15 ms on a busy core), does not land on a crash path: frozen
objects are skipped by every later collection. Why that is safe:
- the collector only frees reference cycles; anything whose last reference goes is freed at once by
  reference counting, frozen or not, and everything created after the freeze (each crash, incident,
  chunk of log) is tracked and collected as before. The collection just before the freeze means
  no garbage is frozen: only what is alive at that moment, the start-up heap (modules, classes,
  the config, the wiring and its rule set), which lives as long as the daemon does;
- what a freeze can keep is a frozen object that later becomes unreachable inside a cycle: bounded
  by the frozen set, which does not grow (one freeze per rule set), never by the daemon's uptime;
- the one part of that heap a running daemon replaces is the wiring, on SIGHUP: the reload thaws
  the heap (`thaw_heap`), so the old wiring is collected, and the new rule set's warm-up freezes
  again. The daemon's `close` thaws it too, for a daemon run inside a longer-lived process (tests,
  `ddtreed promote`, the benchmarks). The freeze is process-wide: a second daemon in the same
  process shares it, which changes no behaviour, only what the collector walks.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import structlog

from ..incidents import encode
from ..rules import RuleSet
from ..tracebacks.assembler import assemble_lines

log = structlog.get_logger(__name__)

WARM_STATES = ("starting", "running")  # not backoff, stopping, crashed…: never on the crash path
WARM_MARK = "ddtreed warm-up, not a crash"
_SITE = "/opt/venv/lib/python3.12/site-packages/sglang/srt/"
# Two ranks of SGLang's scheduler printing a plain RuntimeError: the shape most crashes take (the
# assembler's rank grouping, the scheduler frames, the last-resort rules and the scorer all run).
# The message is as long as a typical one (~100 characters): the catch-all patterns' counted
# repeats build one DFA state per character, kept for the daemon's life, so a longer message
# would keep more of them than most real crashes need (measured: 330 characters +0.2 MB for no
# gain on a 95-character crash).
_MESSAGE = f"RuntimeError: {WARM_MARK}: a synthetic scheduler error, diagnosed once at start (a: 8, b: 33)."
SYNTHETIC_LINES = tuple(
    line for rank in ("TP0", "TP1") for line in (
        f"[2026-01-01 00:00:00 {rank}] Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{_SITE}managers/scheduler.py", line 2968, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        f'  File "{_SITE}managers/scheduler.py", line 1010, in event_loop_overlap',
        "    batch_result = self.run_batch(batch)",
        _MESSAGE,
        "",
    ))


@dataclass(frozen=True)
class WarmedUp:
    """One warm-up: when it ended (the clock's time), its thread CPU, what the rules said."""

    at: float
    cpu_ms: float
    rule_id: str | None
    crashes: int
    catch_alls: tuple[str, ...] = ()  # `RuleSet.warm`: the catch-all message patterns searched
    reverse_programs: int = 0  # and the evidence patterns whose reverse program it built
    frozen: int = 0  # objects in the frozen (permanent) generation after it (`freeze_heap`)
    freeze_ms: float = 0.0  # the collection and freeze, thread CPU (apart from `cpu_ms`)


def freeze_heap() -> int:
    """Collect, then move every object the collector tracks into the permanent generation, which
    later collections skip (see the module doc); the number of objects frozen now. Then give the
    heap freed so far back to the system (`release_freed_heap`)."""
    gc.collect()
    gc.freeze()
    release_freed_heap()
    return gc.get_freeze_count()


def release_freed_heap() -> bool:
    """Return the C heap's free pages to the system (glibc's `malloc_trim(0)`); False where the C
    library has none (musl, macOS). Loading the rules checks every pattern with a full RE2 compile
    and drops the program, and the warm-up's searches build and free more: ~2 MB the allocator
    keeps mapped, though free, for the daemon's whole life (measured: RSS 44.6 -> 42.4 MiB after
    the shipped rules load). Nothing is freed that is in use; later allocations simply map again."""
    try:
        import ctypes

        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (ImportError, OSError):  # pragma: no cover - a Python without ctypes
        return False
    if trim is None:  # pragma: no cover - not glibc
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))


def thaw_heap() -> None:
    """The frozen objects back into the collector's oldest generation (a reload, the daemon's end)."""
    gc.unfreeze()


class DiagnosisWarmUp:
    """Runs the warm-up once per rule set, when `turn` finds the loop idle (see the module doc)."""

    def __init__(self) -> None:
        self._warmed: int | None = None  # id() of the RuleSet warmed (no reference: a reload frees it)
        self.history: list[WarmedUp] = []

    def due(self, rules: RuleSet, state: str, service: Any) -> bool:
        """The rules are not warm yet (nor used: a crash came first) and the loop is idle with a
        launched, read, quiet service. Never inside the crash path: the store's retry waits
        answer the loop's turns there, but by then the rules have diagnosed the crash."""
        return (self._warmed != id(rules) and not getattr(rules, "diagnosed", 0)
                and state in WARM_STATES and service is not None
                and service.reads > 0 and not service.assembler.busy)

    def turn(self, rules: RuleSet, state: str, service: Any, context: Any, clock: Any) -> WarmedUp | None:
        if not self.due(rules, state, service):
            return None
        self._warmed = id(rules)  # once, even if it fails: a warm-up is never retried in a loop
        started = time.thread_time()
        try:
            crashes = tuple(crash for group in assemble_lines(SYNTHETIC_LINES, "<warm-up>") for crash in group)
            diagnosis = rules.diagnose(crashes, context)
            built = rules.warm(crashes)
            encode.dumps(encode.crash_records(crashes))  # the incident row's costliest column, not written
            encode.dumps(dict(diagnosis.signature.params) | dict(diagnosis.match.params))
        except Exception as error:  # noqa: BLE001 - a warm-up must never take the daemon down
            log.warning("diagnosis_warm_up_failed", error=repr(error))
            return None
        cpu_ms = round((time.thread_time() - started) * 1000, 3)
        frozen = freeze_heap()  # the start-up heap, now warm, out of every later collection's walk
        warmed = WarmedUp(clock.time(), cpu_ms, diagnosis.match.rule_id, len(crashes), built.catch_alls,
                          built.reverse_programs, frozen, round((time.thread_time() - started) * 1000 - cpu_ms, 3))
        self.history.append(warmed)
        log.info("diagnosis_warmed", cpu_ms=warmed.cpu_ms, rule=warmed.rule_id,
                 catch_alls=len(warmed.catch_alls), reverse_programs=warmed.reverse_programs,
                 heap_frozen=warmed.frozen, freeze_ms=warmed.freeze_ms)
        return warmed
