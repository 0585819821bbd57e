"""SshHost (the Host seam over SSH) against a real sshd on loopback: spawn, signals, files, follow, tunnel."""

from __future__ import annotations

import http.server
import os
import signal
import threading
import urllib.request
from pathlib import Path

import pytest

import sshd
from ddtreed.fleet import load_inventory
from ddtreed.fleet.remote_host import SshHost
from supervision_helpers import wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")]




@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = sshd.start_test_fleet(tmp_path_factory.mktemp("sshd"))
    yield running
    running.stop()


@pytest.fixture
def host(fleet):
    entry = load_inventory(fleet.inventory()).get("healthy")
    with SshHost(entry) as ssh_host:
        yield ssh_host


def test_spawn_runs_in_own_session_with_env_and_cwd(host, tmp_path):
    process = host.spawn(["sh", "-c", "echo \"cwd=$(pwd) token=$SERVICE_TOKEN\"; exec sleep 60"],
                         {**os.environ, "SERVICE_TOKEN": "a b;c"}, str(tmp_path),
                         str(tmp_path / "out.log"), str(tmp_path / "err.log"))
    try:
        wait_for(lambda: "token=" in (tmp_path / "out.log").read_text(), what="service output")
        assert (tmp_path / "out.log").read_text() == f"cwd={tmp_path} token=a b;c\n"
        assert os.getsid(process.pid) == process.pid == os.getpgid(process.pid)
        assert process.poll() is None
        assert process.signal_group(signal.SIGTERM) is True
        assert process.wait(10) == sshd_exit(signal=signal.SIGTERM)
        assert process.signal_group(signal.SIGTERM) is False  # already gone
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def sshd_exit(code=None, signal=None):
    from ddtreed.records import ExitStatus

    return ExitStatus(code=code, signal=signal)


def test_exit_code_and_kill_reach_the_caller(host, tmp_path):
    out, err = str(tmp_path / "o"), str(tmp_path / "e")
    assert host.spawn(["sh", "-c", "echo boom >&2; exit 3"], {}, None, out, err).wait(10) == sshd_exit(code=3)
    assert (tmp_path / "e").read_text() == "boom\n"
    stubborn = host.spawn(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"], {}, None, out, err)
    assert stubborn.signal_group(signal.SIGTERM)
    assert stubborn.wait(0.5) is None  # ignores TERM
    assert stubborn.signal_group(signal.SIGKILL)
    assert stubborn.wait(10) == sshd_exit(signal=signal.SIGKILL)


def test_sweep_kills_session_survivors_and_token_carriers(host, tmp_path):
    token = f"tok-fleet-test-{os.getpid()}"
    # A duration of this run's own: the escaped child is found machine-wide by its command line,
    # and another test run on the same box must not look like it.
    escapee = f"61.{os.getpid():07d}".encode()
    marker = b"sleep\x00" + escapee + b"\x00"
    leader = host.spawn(["sh", "-c", f"setsid sleep {escapee.decode()} & sleep 60 & wait"],
                        {"DDTREED_SERVICE_TOKEN": token},
                        None, str(tmp_path / "o"), str(tmp_path / "e"))
    in_session = wait_for(lambda: len(host.session_pids(leader.pid)) == 2 and host.session_pids(leader.pid),
                            what="leader and child in the session")
    escaped = wait_for(lambda: _pids_with_cmdline(marker), what="escaped child")
    assert sorted(in_session) == sorted(_pids_in_session(leader.pid)) and leader.pid in in_session
    os.kill(leader.pid, signal.SIGKILL)  # the leader dies; one child lingers in the session
    assert leader.wait(10) == sshd_exit(signal=signal.SIGKILL)
    lingering = [pid for pid in in_session if pid != leader.pid]
    assert host.sweep_session(leader.pid, ("sleep 61*",), token="someone-else") == lingering
    assert host.session_pids(leader.pid) == [] and _pids_with_cmdline(marker) == escaped
    assert host.sweep_session(leader.pid, ("sleep 61*",), token=token) == escaped  # by its token
    assert _pids_with_cmdline(marker) == []


def _pids_with_cmdline(cmdline: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes() == cmdline:
                found.append(int(entry))
        except OSError:
            pass
    return sorted(found)


def test_rotate_file_shifts_backups(host, tmp_path):
    log = tmp_path / "service.log"
    log.write_text("first generation\n")
    assert host.rotate_file(str(log), 2, over_bytes=1000) is False  # small enough
    assert host.rotate_file(str(log), 2, over_bytes=5) is True
    assert not log.exists() and (tmp_path / "service.log.1").read_text() == "first generation\n"
    log.write_text("second\n")
    assert host.rotate_file(str(log), 2) is True
    assert (tmp_path / "service.log.2").read_text() == "first generation\n"
    log.write_text("third\n")
    inode = log.stat().st_ino
    assert host.rotate_file(str(log), 2, copy_truncate=True) is True
    assert (log.stat().st_ino, log.stat().st_size) == (inode, 0)
    assert (tmp_path / "service.log.1").read_text() == "third\n"
    assert (tmp_path / "service.log.2").read_text() == "second\n"
    assert host.rotate_file(str(tmp_path / "absent.log"), 2) is False


def _pids_in_session(session_id: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(entry))
            except (ProcessLookupError, FileNotFoundError):
                pass
    return pids


def test_files_over_sftp(host, tmp_path):
    target = tmp_path / "dir" / "patched.py"
    host.makedirs(str(target.parent))
    host.write_atomic(str(target), b"first\n", 0o600)
    assert target.read_bytes() == b"first\n" and target.stat().st_mode & 0o777 == 0o600
    host.write_atomic(str(target), b"second\n")  # keeps the existing mode
    assert target.read_bytes() == b"second\n" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["patched.py"]  # no temp files left
    assert host.read_bytes(str(target)) == b"second\n"
    assert host.exists(str(target)) and not host.exists(str(tmp_path / "nope"))
    (tmp_path / "link").symlink_to(target)
    assert host.realpath(str(tmp_path / "link")) == str(target)
    host.remove(str(target))
    host.remove(str(target))  # absent is fine
    assert not target.exists()
    with pytest.raises(FileNotFoundError):
        host.read_bytes(str(target))


def test_follower_sees_appended_lines_per_file(host, tmp_path):
    first, second = tmp_path / "out.log", tmp_path / "err.log"
    first.write_text("old line, before following\n")
    follower = host.open_follower([str(first), str(second)])
    try:
        with first.open("a") as handle:
            handle.write("one\ntwo\n")
        with second.open("ab") as handle:  # created after following began; invalid UTF-8 and a long line
            handle.write(b"bad \xff byte\n" + b"x" * 70000 + b"\n")
        received: list = []
        wait_for(lambda: received.extend(follower.read() if follower.wait(0.5) else []) or
                   sum(len(chunk.lines) for chunk in received) >= 4, what="four lines")
        by_source = {}
        for chunk in received:
            by_source.setdefault(chunk.source, []).extend(chunk.lines)
        assert by_source[str(first)] == ["one", "two"]
        assert by_source[str(second)][0] == "bad \ufffd byte"
        assert by_source[str(second)][1] == "x" * 65536  # capped
        assert [c.first_number for c in received if c.source == str(first)][0] == 1
    finally:
        follower.close()


def test_tunnel_reaches_a_local_http_server_and_port_in_use(host):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        url = host.http_base_url("127.0.0.1", port)
        assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{port}")
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert (response.status, response.read()) == (200, b"healthy via /health")
        assert host.http_base_url("127.0.0.1", port) == url  # one tunnel per remote port
        assert host.port_in_use("127.0.0.1", port) is True
    finally:
        server.shutdown()
        server.server_close()
    assert host.port_in_use("127.0.0.1", port) is False
    assert host.gpu_holders() == []  # no nvidia-smi on this machine


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"healthy via {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_run_quotes_arguments_and_reports_exit_codes(host):
    hostile = "$(touch /tmp/ddtreed-fleet-injected); echo pwned"
    result = host.run(["printf", "%s|", hostile, "two words"], 10)
    assert (result.returncode, result.stdout) == (0, f"{hostile}|two words|")
    assert not os.path.exists("/tmp/ddtreed-fleet-injected")
    assert host.run(["sh", "-c", "exit 7"], 10).returncode == 7
    assert host.run(["no-such-program-ddtreed"], 10).returncode == 127
    assert host.run(["sleep", "5"], 0.5).returncode == 124
