"""sd_notify against a real AF_UNIX datagram socket, as systemd would listen on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from ddtreed.ops.notify import Notifier, scrub_environment

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def listener(tmp_path):
    """A bound datagram socket on a filesystem path; yields (path, receive())."""
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield path, lambda: _fields(sock.recv(4096))
    sock.close()


@pytest.fixture
def abstract_listener():
    name = f"ddtreed-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    yield "@" + name, lambda: _fields(sock.recv(4096))
    sock.close()


def _fields(datagram: bytes) -> dict[str, str]:
    lines = datagram.decode().split("\n")
    return dict(line.split("=", 1) for line in lines)


def test_every_message_arrives_on_a_filesystem_socket(listener):
    path, receive = listener
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": path})
    assert notifier.ready("supervising; service loading")
    assert receive() == {"READY": "1", "STATUS": "supervising; service loading"}
    assert notifier.status("loading weights 3/8")
    assert receive() == {"STATUS": "loading weights 3/8"}
    assert notifier.watchdog()
    assert receive() == {"WATCHDOG": "1"}
    assert notifier.reloading()
    reload = receive()
    assert reload["RELOADING"] == "1" and int(reload["MONOTONIC_USEC"]) > 0
    assert notifier.extend_timeout(30)
    assert receive() == {"EXTEND_TIMEOUT_USEC": "30000000"}
    assert notifier.stopping("stopping the service")
    assert receive() == {"STOPPING": "1", "STATUS": "stopping the service"}
    notifier.close()


def test_abstract_namespace_socket(abstract_listener):
    address, receive = abstract_listener
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": address})
    assert notifier.status("incident 12: applying ddtree-verify-graph-width")
    assert receive() == {"STATUS": "incident 12: applying ddtree-verify-graph-width"}


def test_status_text_stays_one_line(listener):
    path, receive = listener
    Notifier(path).status("escalated:\nneeds a person")
    assert receive() == {"STATUS": "escalated: needs a person"}


def test_without_notify_socket_everything_is_a_no_op():
    notifier = Notifier.from_environment({})
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.status("x")
    assert not notifier.watchdog()
    assert not notifier.stopping()
    assert not notifier.reloading()
    assert notifier.watchdog_interval() is None


def test_a_vanished_socket_never_raises(tmp_path):
    notifier = Notifier(str(tmp_path / "gone.sock"))
    assert notifier.ready() is False
    assert notifier.watchdog() is False


def test_watchdog_interval_is_half_of_watchdog_usec(listener):
    path, _ = listener
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "180000000"}
    assert Notifier.from_environment(env).watchdog_interval() == 90.0
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier.from_environment(env).watchdog_interval() == 90.0


def test_watchdog_meant_for_another_process_is_ignored(listener):
    path, _ = listener
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "180000000", "WATCHDOG_PID": "1"}
    assert Notifier.from_environment(env).watchdog_interval() is None
    assert Notifier.from_environment({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "bad"}).watchdog_interval() is None


def test_scrub_environment_keeps_the_rest():
    env = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2", "PATH": "/bin"}
    assert scrub_environment(env) == {"PATH": "/bin"}


def test_a_real_child_process_notifies_through_its_environment(abstract_listener):
    address, receive = abstract_listener
    code = ("from ddtreed.ops.notify import Notifier; n = Notifier.from_environment(); "
            "import sys; sys.exit(0 if n.ready('up') and n.watchdog() else 1)")
    env = dict(os.environ, NOTIFY_SOCKET=address)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0
    assert receive() == {"READY": "1", "STATUS": "up"}
    assert receive() == {"WATCHDOG": "1"}


def test_unset_keeps_the_variables_from_the_service_tree(abstract_listener):
    """The daemon reads them once; the SGLang processes it starts must not see them."""
    address, receive = abstract_listener
    code = ("import os, subprocess, sys\n"
            "from ddtreed.ops.notify import Notifier\n"
            "n = Notifier.from_environment(unset=True)\n"
            "n.ready()\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(sorted(k for k in os.environ "
            "if k in (\"NOTIFY_SOCKET\", \"WATCHDOG_USEC\")))'], capture_output=True, text=True)\n"
            "print(child.stdout.strip(), n.watchdog_interval())\n")
    env = dict(os.environ, NOTIFY_SOCKET=address, WATCHDOG_USEC="4000000")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=60,
                          capture_output=True, text=True)
    assert done.stdout.strip() == "[] 2.0", done.stderr
    assert receive() == {"READY": "1"}


def test_a_manager_that_stops_reading_never_blocks_the_loop(listener):
    """Found under load: the receiver stopped reading for ~10 s (a busy service manager, or the
    test's own listener), the kernel's queue of unread datagrams filled (net.unix.max_dgram_qlen,
    10 by default) and the next WATCHDOG=1 blocked ddtreed's main loop for good: no stop on
    SIGTERM, no supervision. A full queue now drops the message."""
    path, receive = listener
    notifier = Notifier(path)
    outcome: list[bool] = []
    sender = threading.Thread(target=lambda: outcome.extend(notifier.watchdog() for _ in range(500)), daemon=True)
    sender.start()
    sender.join(60)
    assert not sender.is_alive(), "sd_notify blocked on a receiver that does not read"
    assert outcome[0] is True and outcome[-1] is False  # the first ones queued, later ones dropped
    assert receive() == {"WATCHDOG": "1"}  # what was queued still arrives
