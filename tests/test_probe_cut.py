"""The parts of "a probe in flight is cut short when the service dies under it".

- the HTTP client's error says why a probe was cut (ddtreed stopping, or the service's death);
- `ServiceRun.death()` on a real launcher and its real child (real /proc, a real pidfd): a lost
  member is named once, the session is listed at most once a second however often it is
  asked, and the main process' exit is named from then on;
- verification: a probe cut for a lost member that leaves crash text is that crash; one that
  leaves nothing (no text, no exit) is sent again, under the same deadline; a canary cut short
  carries the death's text; a service that exited under its probe is its exit, not `probe-failed`.
The whole loop against a lingering 0.5.16-shaped launcher: tests/test_daemon_probe_cut.py."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

from ddtreed.clock import SystemClock
from ddtreed.config import ProbeConfig
from ddtreed.health.probes import Prober
from ddtreed.health.verify import verify
from ddtreed.loop.wiring import probe_interrupted
from ddtreed.loop.incident_path import probe_crash
from ddtreed.records import Crash, ExitStatus, HealthResult, ServiceContext, Verdict
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import DEATH_CHECK_S, MEMBERS_FIRST_S, ServiceRun
from ddtreed.testing import FakeClock
from supervision_helpers import make_config, wait_for


class SilentServer:
    """Accepts connections and never answers (a server whose request waits on a dead child)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:
                return

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        for sock in self.held:
            sock.close()
        self.listener.close()


def test_the_error_of_a_cut_probe_says_why():
    server = SilentServer()
    try:
        dead = threading.Event()
        death = lambda: "the service's main process (pid 4242) exited" if dead.is_set() else ""  # noqa: E731
        prober = Prober(server.url, interrupted=probe_interrupted(lambda: False, death))
        threading.Timer(0.3, dead.set).start()
        result = prober.generate("x", 4, prober.deadline_in(60.0))
        assert not result.ok and result.elapsed_s < 30
        assert result.detail == "/generate: interrupted: the service's main process (pid 4242) exited"
        stopping = Prober(server.url, interrupted=probe_interrupted(lambda: True, death))
        assert stopping.health(stopping.deadline_in(60.0)).detail == \
            "/health_generate: interrupted: ddtreed is stopping"
        assert Prober(server.url, interrupted=lambda: True).generate("x", 4, time.monotonic() + 60).detail == \
            "/generate: interrupted: ddtreed is stopping"  # a plain True keeps its old meaning
    finally:
        server.close()


# A launcher with a child in its session ("detokenizer"): ready line, then runs until STOP exists.
SERVICE = (
    "import os, subprocess, sys, time\n"
    "stop, pidfile = sys.argv[1], sys.argv[2]\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(pidfile + '.tmp', 'w').write(str(child.pid)); os.replace(pidfile + '.tmp', pidfile)\n"
    "os.write(2, b'[2026-12-03 05:16:01] The server is fired up and ready to roll!\\n')\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.01)\n"
    "child.kill()\n"
)


def test_death_names_a_lost_member_once_then_the_exit(tmp_path):
    stop, pidfile = str(tmp_path / "stop"), str(tmp_path / "child.pid")
    argv = [sys.executable, "-c", SERVICE, stop, pidfile]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    listings = []
    session_pids = run.host.session_pids
    run.host.session_pids = lambda session: listings.append(session) or session_pids(session)
    try:
        assert run.death() == ""  # starting: no member is known, nothing is listed
        assert listings == []
        wait_for(lambda: (run.pump(0.05), run.ready)[1], what="the ready line read")
        child = int(wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read(), what="the child's pid"))
        deadline = time.monotonic() + MEMBERS_FIRST_S + 0.3
        while time.monotonic() < deadline:  # a probe waiting: asked every slice (here far more often)
            assert run.death() == ""
            time.sleep(0.01)
        waited = time.monotonic() - (deadline - MEMBERS_FIRST_S - 0.3)
        assert 2 <= len(listings) <= int(waited / DEATH_CHECK_S) + 1  # at most one /proc pass a second
        assert {run.pid, child} <= run._stable  # members, known from the listings made while it waited
        os.kill(child, signal.SIGKILL)
        why = wait_for(run.death, timeout=5.0, what="the lost member named")
        assert why == f"a member of the service's session died (pid {child})" and run.member_cuts == 1
        assert run.lost_member()  # the loop's own check sees the loss the probe's listing found
        time.sleep(DEATH_CHECK_S + 0.1)
        assert run.death() == ""  # named once: a probe sent again is not cut for the same loss
        open(stop, "w").close()
        why = wait_for(run.death, timeout=10.0, what="the exit named")
        assert why == f"the service's main process (pid {run.pid}) exited"
        assert run.death() == why and run.member_cuts == 1  # an exited service never answers: always
    finally:
        open(stop, "w").close()
        try:
            run.stop("test over", final=True)
        finally:
            run.close()


CHILD_DEATH = Crash(kind="child-death", exception=None, message="Subprocess detokenizer (pid=7) crashed with "
                                                                "exit code -9. Triggering SIGQUIT for cleanup...")


class Feed:
    """A live, ready service as verification sees it; `pump` hands out `text` once it is set."""

    def __init__(self, clock: FakeClock):
        self.clock, self.ready, self.member_cuts = clock, True, 0
        self.text: tuple[Crash, ...] = ()

    def progress_text(self) -> str:
        return "ready"

    def pump(self, timeout: float):
        self.clock.sleep(timeout)
        groups, self.text = ([self.text] if self.text else []), ()
        return groups

    def poll(self):
        return None

    def drain(self):
        return ()

    def turn(self) -> None:
        pass


class Prober2:
    """Health passes; each /generate is `answers.pop(0)`, run against the feed (a member cut)."""

    def __init__(self, feed: Feed, answers):
        self.feed, self.answers, self.generates = feed, answers, 0

    def health(self, deadline: float) -> HealthResult:
        return HealthResult(ok=True, stage="health", detail="/health_generate: HTTP 200")

    def generate(self, prompt: str, max_new_tokens: int, deadline: float) -> HealthResult:
        self.generates += 1
        return self.answers.pop(0)(self.feed)


def cut(text: tuple[Crash, ...]):
    def answer(feed: Feed) -> HealthResult:
        feed.member_cuts += 1
        feed.text = text
        return HealthResult(ok=False, stage="generate",
                            detail="/generate: interrupted: a member of the service's session died (pid 7)")
    return answer


def ok(feed: Feed) -> HealthResult:
    return HealthResult(ok=True, stage="generate", detail="/generate: 4 tokens", completion_tokens=4, output_text="x")


def verify_with(answers):
    clock = FakeClock()
    feed = Feed(clock)
    prober = Prober2(feed, answers)
    verdict = verify(feed, prober, clock, ProbeConfig(), ServiceContext(model_path="/m"), Baselines(), window=False)
    return verdict, prober


class Baselines:
    def baseline(self, key: str):
        return None

    def add_accept_sample(self, key: str, accept_length: float) -> None:
        pass


def test_a_cut_generate_that_left_crash_text_is_that_crash():
    verdict, prober = verify_with([cut((CHILD_DEATH,)), ok])
    assert not verdict.ok and verdict.crashes == (CHILD_DEATH,) and prober.generates == 1
    assert verdict.detail == "generate probe failed: /generate: interrupted: a member of the service's session " \
                             "died (pid 7)"


def test_a_cut_generate_that_left_nothing_is_sent_again():
    verdict, prober = verify_with([cut(()), ok])
    assert verdict.ok and prober.generates == 2  # a loss alone is no failure


def test_a_canary_cut_by_a_death_carries_the_deaths_text():
    clock = FakeClock()
    feed = Feed(clock)

    def canary(verdict: Verdict) -> Verdict:  # its requests cut: "could not run", no crash of its own
        feed.text = (CHILD_DEATH,)
        return Verdict(False, "canary could not run: interrupted: a member of the service's session died (pid 7)",
                       stage="canary")

    verdict = verify(feed, Prober2(feed, [ok]), clock, ProbeConfig(), ServiceContext(model_path="/m"), Baselines(),
                     window=False, canary=canary)
    assert not verdict.ok and verdict.stage == "canary" and verdict.crashes == (CHILD_DEATH,)


def test_a_service_that_exited_under_its_probe_is_its_exit_not_a_probe_failure():
    cut_short = Verdict(False, "generate probe failed: /generate: interrupted: the service's main process (pid 9) "
                               "exited", exit_status=ExitStatus(code=None, signal=9), stage="generate")
    crash = probe_crash(cut_short, 5.0)
    assert crash.kind == "killed" and crash.message == "service killed by signal 9 without a traceback"
    alive = Verdict(False, "generate probe failed: /generate: TimeoutError: no answer", stage="generate")
    assert probe_crash(alive, 5.0).kind == "probe-failed"  # a live service's failed probe stays one
