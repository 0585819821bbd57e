"""A rule's remediation ids stepped down one at a time through the one `attempt()`, outside any
incident and without restarting anything: what the ladder tests (remediation, canary demo) need."""

from __future__ import annotations

from dataclasses import replace

from ddtreed.remediation import Launch, attempt, revert


class Ladder:
    def __init__(self, engine, remediation_ids, context, env=None):
        self.engine, self.context, self.pending = engine, context, list(remediation_ids)
        self.launch = Launch(list(context.argv), dict(env or {}))
        self.applied: list = []  # (application, attempt), newest last
        self.skipped: list[tuple[str, str]] = []  # (id, why not applicable)

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.launch.argv)

    def step(self):
        """Apply the next applicable remediation: (application, attempt), or None when exhausted."""
        while self.pending:
            remediation_id = self.pending.pop(0)
            result = attempt(remediation_id, None, engine=self.engine, store=None, launch=self.launch,
                             context=replace(self.context, argv=self.argv))
            if result.outcome == "skipped":
                self.skipped.append((remediation_id, result.detail))
                continue
            assert result.outcome == "applied", result
            self.applied.append((result.application, result))
            return result.application, result
        return None

    def undo(self) -> Launch:
        """Revert the last applied step; the launch it restores."""
        application, _ = self.applied.pop()
        revert(application, engine=self.engine, store=None, launch=self.launch)
        return self.launch
