"""One launch of the service and what it writes: process tree, log feed, crash assembly, milestones.

`ServiceRun` is the `LogFeed` verification reads and the loop watches. Each turn (`pump`) first
calls `on_turn` (the daemon answers signals and pings the watchdog there), then reads new lines.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from dataclasses import replace
from typing import Callable

import structlog

from . import gcpause
from ._proctree import STATE_DIR_VARIABLE
from ..clock import Clock
from ..config import Config
from ..health.probes import MilestoneTracker
from ..incidents.stderr_tail import TAIL_LINES, ServiceOutput
from .host import Host
from .launch import Supervisor
from ..records import Crash, ExitStatus
from ..tracebacks import Assembler
from ..health.httpclient import MEMBER_DIED
from ..health.verify import flatten

log = structlog.get_logger(__name__)

DRAIN_QUIET_S = 0.2  # after the service exits, its logs are complete once this long quiet
DRAIN_MAX_S = 3.0  # ...or after this long at most (a remote tail can lag)
MEMBERS_EVERY_S = 5.0  # a serving local service's session is listed this often (one /proc pass)...
MEMBERS_FIRST_S = 1.0  # ...the second time this soon after the first (its members known early)
LOST_MEMBER_S = 30.0  # a process that left the session this long ago no longer confirms crash text
DEATH_CHECK_S = 1.0  # while a probe waits, the session is listed (a /proc pass) at most this often


class ServiceRun:
    def __init__(self, host: Host, config: Config, argv: list[str], env: dict[str, str], clock: Clock,
                 on_turn: Callable[[], None] = lambda: None,
                 on_progress: Callable[[str], None] = lambda text: None):
        self.host, self.config, self.clock = host, config, clock
        # The state dir in the service's environment: a later daemon on this state dir finds the
        # service by it even when this daemon dies without a record (ddtreed.loop.recovery).
        env = {**env, STATE_DIR_VARIABLE: os.path.realpath(config.paths.state_dir)}
        self._turning = TurningHost(host, on_turn)
        self.supervisor = Supervisor(self._turning, config, argv, env, clock=clock.monotonic)
        self.assembler = Assembler(eager=True)
        self.milestones = MilestoneTracker()
        stdout_log, stderr_log = self.supervisor.log_paths
        self._output = ServiceOutput([stderr_log], [stdout_log])  # what it said, for the incident
        self._newest = NewestChunks()  # ...kept as the chunks read until `output` is asked for
        self.follower = None
        self._closed = False
        self._on_turn, self._on_progress = on_turn, on_progress
        self.serving = None  # a ServingWatch (ddtreed/health/serving.py) once the launch is verified
        self.serving_events: list = []
        self._wake_quiet: Callable[[], bool] = lambda: False  # the follower's, once it polls the pidfd
        self.reads = 0  # pump turns that read the logs (the warm-up waits for the first)
        self._members: set[int] = set()  # the serving session's processes at the last listing
        self._stable: set[int] = set()  # ...and those in the two last listings: its members
        self._members_at = float("-inf")
        self._listing_deferred = False  # a listing due on a crash's turn waits for the next turn
        self._lost: dict[int, float] = {}  # processes that left the session since: pid -> when seen gone
        # The listings are made by the pump and by `death()`, which a probe's thread asks: one at a
        # time, and each replaces the sets and the dict above (never changed in place), so
        # `lost_member()` on the loop thread reads a whole one.
        self._listing = threading.Lock()
        self._reported: frozenset[int] = frozenset()  # lost members `death()` has cut a probe for
        self._death_at = float("-inf")  # `death()`'s last look at the session
        self.member_cuts = 0  # probes `death()` cut for a lost member (verify sends such a probe again)

    @property
    def output(self) -> ServiceOutput:
        """The tails of what the service wrote (stderr, stdout), up to the last read."""
        for tail in tails_of(self._newest.take()):
            self._output.feed(tail)
        return self._output

    @property
    def pid(self) -> int | None:
        return self.supervisor.pid

    @property
    def token(self) -> str | None:
        return self.supervisor.token

    @property
    def ready(self) -> bool:
        return self.milestones.ready

    @property
    def bind_error(self) -> str | None:
        """The log's `[Errno 98] error while attempting to bind …` line, if this launch failed to bind."""
        return self.milestones.bind_error

    def owns_port(self) -> bool | None:
        """Does a process of this launch listen on the service port? None: cannot tell (remote)."""
        from .host import LocalHost
        from ..health.serving import port_owner_in_tree

        pid = self.supervisor.pid
        if pid is None or not isinstance(self.host, LocalHost):
            return None
        return port_owner_in_tree(pid, self.supervisor.port)

    def progress_text(self) -> str:
        return self.milestones.progress_text()

    def start(self) -> int:
        """Spawn the service, then follow its fresh (just rotated) logs from their first line."""
        process = self.supervisor.start()
        self.follower = follower = self.host.open_follower(self.supervisor.log_paths
                                                           + list(self.config.paths.extra_logs))
        pidfd = getattr(process, "pidfd", None)
        wake_on, wake_quiet = getattr(follower, "wake_on", None), getattr(follower, "wake_quiet", None)
        if pidfd is not None and wake_on is not None and wake_quiet is not None:
            # The follower's waits and hold-offs poll the service's pidfd: its exit wakes the loop
            # at once, and while it runs `poll` needs no waitpid per turn.
            wake_on(pidfd)
            self._wake_quiet = wake_quiet
        return process.pid

    def turn(self) -> None:
        """Answer signals and the watchdog now (a stop request raises `Stopping` from here)."""
        self._on_turn()

    def pump(self, timeout: float) -> list[tuple[Crash, ...]]:
        """One turn: `on_turn`, new log lines → assembler and milestones; settled crash groups."""
        gcpause.resume()  # a crash path's pause (gcpause) lasts one turn at most
        self._on_turn()
        if self.follower is None:
            self.clock.sleep(timeout)
            return []
        self.follower.wait(timeout)
        chunks = self.follower.read()
        self.reads += 1
        for chunk in chunks:
            self.assembler.feed(chunk)
            if self.milestones.feed(chunk):
                self._on_progress(self.milestones.progress_text())
            if self.serving is not None:
                self.serving_events += self.serving.feed(chunk)
        self._newest.add(chunks)
        groups = self.assembler.take(self.clock.time())
        # Listed from the ready line on (not only once serving is verified): a member lost in the
        # first second of serving is then known as one (device run r15b: a detokenizer killed then).
        if (self.serving is not None or self.milestones.ready) and self.clock.monotonic() - self._members_at >= (
                MEMBERS_EVERY_S if self._stable else MEMBERS_FIRST_S):
            # Not on the turn that read a crash (once: the next turn lists, crash or not): its
            # `lost_member()` makes its own pass against the earlier listings' members at once,
            # so a second /proc pass here would only delay the incident.
            if groups and not self._listing_deferred:
                self._listing_deferred = True
            else:
                self._listing_deferred = False
                self._list_members()
        return groups

    def _session(self) -> set[int] | None:
        """The session's live processes now (local host: one /proc pass); None where not known."""
        process = self.supervisor.process
        if process is None or not getattr(self.host, "local", False):
            return None
        return set(self.host.session_pids(process.pid))

    def _list_members(self) -> None:
        """Every MEMBERS_EVERY_S from the ready line on: a process listed twice in a row is a member (a
        scheduler, the detokenizer; not a compiler run that came and went); one that left the
        session is remembered for LOST_MEMBER_S."""
        with self._listing:
            self._list_members_now()

    def _list_members_now(self) -> None:
        current, now = self._session(), self.clock.monotonic()
        self._members_at = now
        if current is None:
            return
        lost = {**self._lost, **{pid: now for pid in self._stable - current}}
        self._lost = {pid: at for pid, at in lost.items() if now - at < LOST_MEMBER_S}
        known = bool(self._stable)
        self._stable, self._members = self._members & current, current
        if self._stable and not known:
            log.info("service.members", pids=sorted(self._stable))  # crash text can be confirmed by a loss now

    def lost_member(self) -> bool:
        """A member of the serving service's session (a rank's scheduler, the detokenizer) has left
        it: what a real crash does within milliseconds of its text (SGLang's failing child exits,
        though 0.5.16's launcher lingers after its SIGQUIT), and what a prompt that quotes a crash
        report never does. False where it cannot be told (remote host, not ready for two listings)."""
        if not self._stable and not self._lost:
            return False
        current, now = self._session(), self.clock.monotonic()
        if current is None:
            return False
        return any(now - at < LOST_MEMBER_S for at in self._lost.values()) or bool(self._stable - current)

    def death(self) -> str:
        """Why a probe of this launch in flight should give up now; "" while the service may still
        answer it. Its main process exited, or (from the ready line on) a member of its session
        left it: real 0.5.16's launcher outlives a dead detokenizer or scheduler for a minute and
        more (its coredump wait), and a request sent just then is never answered (device run
        s15b). The HTTP client asks this between its 0.2 s slices, from whichever thread runs the
        probe: the exit is a poll of the pidfd (no waitpid, nothing reaped), the session is
        listed (one /proc pass) at most once per DEATH_CHECK_S, for a loss of a member; the
        pump's own listing, which it stands in for while a probe holds the loop, at the pump's
        cadence (a member is a process listed twice MEMBERS_EVERY_S apart, as ever). A lost
        member cuts one probe: verification then reads the logs, and a probe sent again is cut
        only by another loss or the exit."""
        process = self.supervisor.process
        if process is None or self._closed:
            return ""
        if self._exited(process):
            return f"the service's main process (pid {process.pid}) exited"
        if self.serving is None and not self.milestones.ready:
            return ""  # starting: its processes come and go, none is a member yet
        with self._listing:
            now = self.clock.monotonic()
            if now - self._members_at >= (MEMBERS_EVERY_S if self._stable else MEMBERS_FIRST_S):
                self._list_members_now()  # the pump's listing, due while the probe holds the loop
            elif now - max(self._members_at, self._death_at) >= DEATH_CHECK_S:
                # In between, only a loss is recorded: who is a member stays judged at the pump's
                # cadence (listed twice MEMBERS_EVERY_S apart). Listings a second apart would make
                # any helper that lives two seconds (a compiler run, a worker restarted by design)
                # a member, and its normal end would cut the probe.
                self._death_at, current = now, self._session()
                if current is not None and self._stable - current:
                    self._lost = {**self._lost, **{pid: now for pid in self._stable - current}}
            new = set(self._lost) - self._reported
            if not new:
                return ""
            self._reported |= new
            self.member_cuts += 1
        return f"{MEMBER_DIED} (pid {', '.join(map(str, sorted(new)))})"

    def _exited(self, process) -> bool:
        """The main process has ended (any thread): its pidfd is readable; without one, a local
        process' poll (subprocess' own lock makes that safe); elsewhere not told here."""
        pidfd = getattr(process, "pidfd", None)
        if pidfd is not None:
            try:
                return bool(select.select([pidfd], [], [], 0)[0])
            except (OSError, ValueError):  # closed under us: the run is over
                return False
        return getattr(self.host, "local", False) and process.poll() is not None

    def poll(self) -> ExitStatus | None:
        """The service's exit status once it ended. No waitpid when the last wait polled its
        pidfd and found it running (the follower's `wake_quiet`): an exit after that poll wakes
        the next wait at once, and that turn's poll asks the kernel."""
        return self.supervisor.poll(running=self._wake_quiet())

    def drain(self) -> tuple[Crash, ...]:
        """Read what the dead service wrote, then take every pending crash.

        No settle window: the process that wrote them has exited, so waiting cannot complete a
        traceback, it can only delay the relaunch. Once no process of the service's session is
        left (a local host, where its log files are read directly) nothing more can come: the
        logs are read to their end and the crashes taken at once. Otherwise (a child still
        exiting, a remote tail that can lag) reading goes on until the logs stay quiet for
        DRAIN_QUIET_S, DRAIN_MAX_S at most.
        """
        if self.follower is not None:
            clock = self.clock
            quiet_since = clock.monotonic()
            deadline = quiet_since + DRAIN_MAX_S
            gone = False
            while (now := clock.monotonic()) < deadline and now - quiet_since < DRAIN_QUIET_S:
                self._on_turn()  # a flood keeps the logs busy for DRAIN_MAX_S: SIGTERM is answered here
                # asked before the read, so a write before the last exit is in it; once gone, gone
                gone = gone or self.writers_gone()
                chunks = self.follower.read()
                for chunk in chunks:
                    self.assembler.feed(chunk)
                self._newest.add(chunks)
                if chunks:
                    quiet_since = clock.monotonic()
                elif gone:
                    break  # read to the end, and nobody is left to write more
                else:
                    self.follower.wait(DRAIN_QUIET_S / 4)
        return flatten(self.assembler.take(self.clock.time(), final=True))

    def sleep_until_exit(self, seconds: float) -> None:
        """Sleep up to `seconds`, ended at once by the service's exit where its pidfd is known (a
        `select` on it): the settle wait of crash text read from a live service waits on that exit,
        so a real crash's incident is not held back to the next slice. Elsewhere (no pidfd: a
        remote host, an old kernel, the fake host of the tests) the clock's sleep. `poll` after it
        asks the kernel: the follower's "the last wait found it running" is spent by the first
        `poll` that reads it."""
        pidfd = getattr(self.supervisor.process, "pidfd", None)
        if pidfd is None:
            self.clock.sleep(seconds)
            return
        try:
            select.select([pidfd], [], [], max(seconds, 0.0))
        except (OSError, ValueError):  # closed under us (the run stopped): the plain sleep
            self.clock.sleep(seconds)

    def writers_gone(self) -> bool:
        """True when the service exited and no process of its session is left to write its logs
        (local host only: a remote tail may still be delivering what they wrote)."""
        process = self.supervisor.process
        host = self.host
        if process is None or not getattr(host, "local", False) or process.poll() is None:
            return False
        return not host.session_pids(process.pid)

    def stop(self, reason: str, final: bool = False, drain: bool | None = None,
             settle_s: float = 0.0) -> ExitStatus | None:
        """Drain and stop (SIGTERM to the launcher first); `drain=False` for a failed service.

        The waits (tree exit, port, GPUs) answer signals: a SIGTERM meanwhile raises `Stopping`,
        except when `final`: ddtreed itself is stopping, so nothing interrupts it and it does not
        wait for the port (no restart follows)."""
        if self.supervisor.process is None:
            return None
        if final:
            self._turning.interruptible = False
            self.supervisor.release_timeout_s = 0.0
        return self.supervisor.stop(reason, drain=drain, settle_s=settle_s)

    def close(self) -> None:
        """Stop following the logs (the follower object stays, closed, for whoever inspects it)."""
        if self.follower is not None and not self._closed:
            self.follower.close()
        self._closed = True
        self._wake_quiet = lambda: False
        close_pidfd = getattr(self.supervisor.process, "close_pidfd", None)
        if close_pidfd is not None:
            close_pidfd()


class NewestChunks:
    """Per source, the newest chunks that hold its last TAIL_LINES lines, in the order read: all
    that a `ServiceOutput` would keep of them (its tails hold the newest TAIL_LINES lines, fewer
    when they pass TAIL_BYTES). The pump adds every read's chunks (a deque append each, no line
    split or decode); `take` hands them over when an incident asks for the tails."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[deque, list[int]]] = {}  # source -> ((chunk, lines), [lines in all])

    def add(self, chunks) -> None:
        for chunk in chunks:
            kept = self._kept.get(chunk.source)
            if kept is None:
                kept = self._kept[chunk.source] = (deque(), [0])
            held, total = kept
            count = getattr(chunk, "line_count", None)
            if count is None:
                count = len(chunk.lines)
            held.append((chunk, count))
            total[0] += count
            while total[0] - held[0][1] >= TAIL_LINES:  # the older ones' lines would leave the tail
                total[0] -= held.popleft()[1]

    def take(self) -> list:
        """The kept chunks (each source's in its order), and forget them."""
        chunks = [chunk for held, _ in self._kept.values() for chunk, _ in held]
        self._kept.clear()
        return chunks


def tails_of(chunks):
    """What a `ServiceOutput` (one tail per source) needs of one read's chunks, in their order: per
    source only the newest chunks that hold its last TAIL_LINES lines, each cut by `tail_of`. The
    tails keep the newest TAIL_LINES lines (fewer when they pass TAIL_BYTES), and which of those
    they keep depends on those lines alone: the older chunks' lines would leave them anyway."""
    kept, counted = [], {}
    for chunk in reversed(chunks):
        have = counted.get(chunk.source, 0)
        if have < TAIL_LINES:
            kept.append(chunk)
            count = getattr(chunk, "line_count", None)
            counted[chunk.source] = have + (len(chunk.lines) if count is None else count)
    return [tail_of(chunk) for chunk in reversed(kept)]


def tail_of(chunk):
    """The chunk's last TAIL_LINES lines: all that a `ServiceOutput` keeps of it (its tails hold the
    newest TAIL_LINES lines, fewer when they pass TAIL_BYTES), without a per-line loop over the rest."""
    tail = getattr(chunk, "tail", None)  # a follower's BlockChunk: without splitting the rest at all
    if tail is not None:
        return tail(TAIL_LINES)
    if len(chunk.lines) <= TAIL_LINES:
        return chunk
    return replace(chunk, first_number=chunk.first_number + len(chunk.lines) - TAIL_LINES,
                   lines=chunk.lines[-TAIL_LINES:], text=None)


class TurningHost:
    """The service's host as the supervisor's waits see it: each poll of the tree, the port or
    the GPUs first takes a loop turn, so a SIGTERM during a long stop is honoured at once."""

    def __init__(self, host: Host, on_turn: Callable[[], None]):
        self._host, self._on_turn = host, on_turn
        self.interruptible = True

    def __getattr__(self, name: str):
        return getattr(self._host, name)

    def _turn(self) -> None:
        if self.interruptible:
            self._on_turn()

    def session_pids(self, session_id: int) -> list[int]:
        self._turn()
        return self._host.session_pids(session_id)

    def port_in_use(self, address: str, port: int) -> bool:
        self._turn()
        return self._host.port_in_use(address, port)

    def gpu_holders(self, pids: list[int] | None = None) -> list[int]:
        self._turn()
        return self._host.gpu_holders(pids)
