"""The loop pings systemd's watchdog (WATCHDOG=1 to a real notify socket) at most once a second
and at least every half of the watchdog's time (WATCHDOG_USEC), not once per turn: in a log flood the loop turns ~50
times a second. The loop's clock is the middle tier's fake one, the socket is real."""

from __future__ import annotations

import socket

from ddtreed.loop.daemon import Daemon
from ddtreed.loop.wiring import build
from ddtreed.ops.notify import Notifier
from ddtreed.testing import FakeClock, FakeHost, crashing

from test_notify_loop import config


def pings(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            count += listener.recv(4096).decode().split("\n").count("WATCHDOG=1")
        except BlockingIOError:
            return count


def daemon_with(tmp_path, watchdog_usec: int | None):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify.sock"))
    listener.setblocking(False)
    settings = config(tmp_path, {})
    clock = FakeClock()
    host = FakeHost(lambda argv, env, start: crashing(), clock)
    daemon = Daemon(settings, wiring=build(settings, host=host, clock=clock, prober=host.prober),
                    notifier=Notifier(str(tmp_path / "notify.sock"), watchdog_usec))
    return daemon, clock, listener


def test_many_turns_in_a_second_send_one_ping_the_next_second_another(tmp_path):
    daemon, clock, listener = daemon_with(tmp_path, watchdog_usec=60_000_000)
    with listener:
        for _ in range(50):
            daemon._turn()
        assert pings(listener) == 1
        clock.sleep(0.5)
        daemon._turn()
        assert pings(listener) == 0
        clock.sleep(0.6)
        for _ in range(50):
            daemon._turn()
        assert pings(listener) == 1


def test_a_short_watchdog_is_pinged_every_half_of_its_time(tmp_path):
    daemon, clock, listener = daemon_with(tmp_path, watchdog_usec=800_000)  # a ping due every 0.4 s
    with listener:
        sent_at = []
        for _ in range(40):  # turns 0.1 s apart
            daemon._turn()
            if pings(listener):
                sent_at.append(clock.monotonic())
            clock.sleep(0.1)
        gaps = [later - earlier for earlier, later in zip(sent_at, sent_at[1:])]
        assert len(sent_at) >= 8 and all(0.39 <= gap <= 0.51 for gap in gaps), gaps  # never 0.8 s


def test_no_watchdog_set_no_ping(tmp_path):
    daemon, clock, listener = daemon_with(tmp_path, watchdog_usec=None)
    with listener:
        for _ in range(20):
            daemon._turn()
            clock.sleep(1.0)
        assert pings(listener) == 0
