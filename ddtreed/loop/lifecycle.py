"""The daemon's lifecycle as a transition table: every state change names where it comes from.

`Lifecycle.enter(state, text)` publishes the change; a transition the table does not list is a
bug in the loop and raises `IllegalTransition` (a middle-tier test walks every path through it).
Re-entering the current state only updates its text (startup progress, for example).
"""

from __future__ import annotations

import queue
import signal
from typing import Callable, Iterator

from ..records import DAEMON_STATES, checked

EXIT_OK = 0
# The restart budget is spent. 75 is EX_TEMPFAIL of sysexits(3): `systemctl status` shows
# `status=75/TEMPFAIL`, not an LSB word (3 reads NOTIMPLEMENTED there), and it is what happened:
# the failure may pass (a GPU reset, freed memory), but a person decides when to retry. The units
# keep systemd from retrying behind the budget's back: RestartPreventExitStatus=2 75.
EXIT_GAVE_UP = 75

# from-state -> the states it may go to (besides itself, and besides `stopping`, always allowed)
TRANSITIONS: dict[str, frozenset[str]] = {
    "starting": frozenset({"preflight", "backoff", "verifying", "running", "crashed", "escalated"}),
    "preflight": frozenset({"remediating", "blocked", "starting", "backoff", "escalated"}),
    "blocked": frozenset({"preflight", "remediating"}),  # remediating: a GPU holder let go
    "remediating": frozenset({"preflight", "restarting", "starting", "backoff", "escalated"}),
    "running": frozenset({"crashed"}),
    "crashed": frozenset({"diagnosing"}),
    "diagnosing": frozenset({"remediating", "blocked", "starting", "backoff", "escalated"}),
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



class SignalQueue:
    """Signal handlers only enqueue (as gunicorn's arbiter does); the loop acts between steps."""

    HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
    STOP = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.stop_asked = False  # a SIGTERM/SIGINT is queued: probes in flight end early

    def put(self, signum: int) -> None:
        """Safe from a signal handler and from any thread."""
        if signum in self.STOP:
            self.stop_asked = True
        self._queue.put(signum)

    def install(self) -> None:
        for signum in self.HANDLED:
            signal.signal(signum, lambda number, _frame: self.put(number))

    def pending(self) -> Iterator[int]:
        while not self._queue.empty():
            yield self._queue.get()
