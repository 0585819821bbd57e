"""The daemon's lifecycle as a transition table: every state change names where it comes from.

`Lifecycle.enter(state, text)` publishes the change; a transition the table does not list is a
bug in the loop and raises `IllegalTransition` (a middle-tier test walks every path through it).
Re-entering the current state only updates its text (startup progress, for example).
"""

from __future__ import annotations

from typing import Callable

from .records import DAEMON_STATES, checked

# from-state -> the states it may go to (besides itself, and besides `stopping`, always allowed)
TRANSITIONS: dict[str, frozenset[str]] = {
    "starting": frozenset({"preflight", "backoff", "verifying", "running", "crashed", "escalated"}),
    "preflight": frozenset({"remediating", "blocked", "starting", "backoff", "escalated"}),
    "blocked": frozenset({"preflight"}),
    "remediating": frozenset({"preflight", "restarting", "starting", "backoff", "escalated"}),
    "running": frozenset({"crashed"}),
    "crashed": frozenset({"diagnosing"}),
    "diagnosing": frozenset({"remediating", "starting", "backoff", "escalated"}),
    "restarting": frozenset({"starting", "escalated"}),
    "verifying": frozenset({"running", "crashed", "remediating", "escalated"}),
    "backoff": frozenset({"starting", "escalated"}),
    "escalated": frozenset({"starting", "backoff", "crashed"}),
    "stopping": frozenset({"stopped", "gave-up"}),
    "stopped": frozenset(),
    "gave-up": frozenset(),  # final, like stopped: `status` says it gave up, not that it stopped
}
FINAL = ("stopped", "gave-up")


class Stopping(Exception):
    """Raised inside a wait when a stop was requested (SIGTERM/SIGINT, `request_stop`): unwind."""


class IllegalTransition(RuntimeError):
    """The loop tried a state change the table does not allow: a bug, never a user error."""


def allowed(source: str, target: str) -> bool:
    if source in FINAL:
        return False
    return target == source or target == "stopping" or target in TRANSITIONS[source]


class Lifecycle:
    """The current state and the one way to change it."""

    def __init__(self, publish: Callable[[str, str], None], state: str = "starting"):
        self.state = checked(state, DAEMON_STATES, "daemon state")
        self._publish = publish
        self.history: list[str] = [state]  # every state entered, in order (tests, SIGUSR1)

    def enter(self, state: str, text: str) -> None:
        checked(state, DAEMON_STATES, "daemon state")
        if not allowed(self.state, state):
            raise IllegalTransition(f"{self.state} -> {state} is not a transition of the daemon")
        if state != self.state:
            self.history.append(state)
        self.state = state
        self._publish(state, text)

