"""Crashes that belong together: ranks failing within one quiet window, plus shared context."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..records import Crash

MAX_CRASHES = 256  # per group (TP×DP ranks plus children fit); a full group is emitted early
MAX_CONTEXT = 16
ASSERT_SAMPLES = 3


@dataclass
class Group:
    started: float
    last_activity: float = 0.0
    crashes: list[Crash] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    sigquit: list[tuple[str, str, int]] = field(default_factory=list)  # (text, source, line)
    asserts: int = 0
    assert_samples: list[str] = field(default_factory=list)
    nccl: dict[str, Crash] = field(default_factory=dict)  # per source: a timeout line, no abort yet
    native_sources: set[str] = field(default_factory=set)  # sources whose C++ abort was parsed
    sigquit_context: tuple[str, ...] = ()  # communication failure lines printed before the first SIGQUIT

    @property
    def full(self) -> bool:
        return len(self.crashes) >= MAX_CRASHES

    def add_crash(self, crash: Crash) -> None:
        self.crashes.append(crash)

    def add_sigquit(self, text: str, source: str, number: int, context: tuple[str, ...] = ()) -> None:
        if not self.sigquit:
            self.sigquit_context = context
        if len(self.sigquit) < MAX_CONTEXT:
            self.sigquit.append((text, source, number))

    def add_assert(self, text: str) -> None:
        # A device-side assert prints one line per GPU thread: count them, keep a few.
        self.asserts += 1
        if len(self.assert_samples) < ASSERT_SAMPLES:
            self.assert_samples.append(text[:1000])

    def add_assert_run(self, count: int, texts) -> None:
        """`count` assert lines in a row, as `add_assert` of each; `texts` yields their texts in
        order, read only while samples are still kept."""
        if len(self.assert_samples) < ASSERT_SAMPLES:
            for text in texts:
                self.assert_samples.append(text[:1000])
                if len(self.assert_samples) >= ASSERT_SAMPLES:
                    break
        self.asserts += count

    def add_nccl(self, crash: Crash) -> None:
        self.nccl.setdefault(crash.source, crash)

    def emit(self) -> tuple[Crash, ...]:
        crashes = list(self.crashes)
        crashes += [c for source, c in self.nccl.items() if source not in self.native_sources]
        if not crashes:
            crashes = self._silent_death()
        context = tuple(text for text, _, _ in self.sigquit)
        if self.asserts:
            context += (f"{self.asserts} device-side assertion line(s), e.g.:",
                        *self.assert_samples)
        return tuple(replace(c, context=c.context + context, device_asserts=self.asserts)
                     for c in crashes)

    def _silent_death(self) -> list[Crash]:
        """No traceback at all: the main process's SIGQUIT (or a bare assert flood) is the crash."""
        if self.sigquit:
            text, source, number = self.sigquit[0]
            return [Crash(kind="child-death", exception=None, message=text, source=source,
                          first_line=number, last_line=number, detected_at=self.last_activity,
                          excerpt=(text,), context=self.sigquit_context)]
        if self.asserts:
            return [Crash(kind="child-death", exception=None,
                          message="device-side assertion failed: " + self.assert_samples[0],
                          detected_at=self.last_activity)]
        return []
