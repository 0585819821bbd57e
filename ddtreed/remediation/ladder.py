"""A degradation ladder: a rule's ordered remediation ids, stepped down one at a time.

Each step is applied on top of the launch the previous steps produced, and remembered with its
inverse (the launch before it), so the daemon can undo a step that did not verify and move on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ..records import Application, LaunchChange, ServiceContext
from .engine import Engine, Plan


@dataclass
class Ladder:
    engine: Engine
    remediation_ids: tuple[str, ...]
    context: ServiceContext
    env: Mapping[str, str] = field(default_factory=dict)
    applied: list[tuple[Application, Plan]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (id, why not applicable)
    position: int = 0

    def step(self, incident_id: int | None = None) -> tuple[Plan, Application] | None:
        """Apply the next applicable remediation; None when the ladder is exhausted."""
        while self.position < len(self.remediation_ids):
            remediation_id = self.remediation_ids[self.position]
            self.position += 1
            plan = self.engine.plan(remediation_id, self.context, env=self.env)
            if not plan.applicable:
                self.skipped.append((remediation_id, plan.reason))
                continue
            application = self.engine.apply(plan, incident_id=incident_id)
            self.applied.append((application, plan))
            if plan.launch is not None:
                self._move_to(plan.launch)
            return plan, application
        return None

    def undo(self) -> LaunchChange | None:
        """Revert the last applied step; return the launch it restores (None for a patch)."""
        if not self.applied:
            return None
        application, plan = self.applied.pop()
        previous = self.engine.revert(application.application_id)
        if previous is not None:
            self._move_to(previous)
        return previous

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.context.argv)

    def _move_to(self, launch: LaunchChange) -> None:
        self.context = replace(self.context, argv=tuple(launch.argv))
        self.env = dict(launch.env)
