"""`ddtreed fleet …` end to end against real sshd hosts: healthy, down, changed host key, refused key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sshd
from supervision_helpers import wait_for
from ddtreed.fleet import load_inventory, run_on_hosts

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")]

REPO = Path(__file__).resolve().parent.parent
CORPUS_LOG = REPO / "tests" / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
EXPECTED = {"healthy": (True, None), "down": (False, "unreachable"),
            "changed-key": (False, "host key mismatch"), "refused-key": (False, "auth failed")}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = sshd.start_test_fleet(tmp_path_factory.mktemp("fleet"))
    yield running
    running.stop()


def ddtreed(*args: str, check_json: bool = True) -> tuple[int, dict | str, str]:
    done = subprocess.run([sys.executable, "-m", "ddtreed", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    output = json.loads(done.stdout) if check_json and "--json" in args else done.stdout
    return done.returncode, output, done.stderr


def by_name(report: dict) -> dict[str, dict]:
    return {host["name"]: host for host in report["hosts"]}


def test_status_reports_every_host_side_by_side_without_key_material(fleet):
    inventory = fleet.inventory()
    code, report, stderr = ddtreed("fleet", "status", "--inventory", str(inventory), "--json")
    assert code == 1  # some hosts failed
    assert [h["name"] for h in report["hosts"]] == list(EXPECTED)
    assert {h["name"]: (h["ok"], h["error"]) for h in report["hosts"]} == EXPECTED
    healthy = by_name(report)["healthy"]
    assert healthy["result"]["alive"] is False and healthy["result"]["exit_code"] == 3  # no daemon there
    assert "SHA256:" in by_name(report)["changed-key"]["detail"]
    assert report["elapsed_s"] > 0
    secret = "".join(fleet.client_key.read_text().splitlines()[1:-1])
    for text in (json.dumps(report), stderr):
        assert secret[:40] not in text and "PRIVATE KEY" not in text
    code, table, _ = ddtreed("fleet", "status", "--inventory", str(inventory))
    lines = table.splitlines()
    assert lines[0].split() == ["HOST", "RESULT", "DETAIL"]
    assert lines[-1].startswith("1 ok, 3 failed in ")
    assert any(line.startswith("changed-key") and "host key mismatch" in line for line in lines)


def test_unknown_host_key_refused_then_accept_new_records_it(fleet, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    changed_line = [line for line in fleet.known_hosts.read_text().splitlines()
                    if f":{fleet.servers['changed-key'].port}]" in line or
                    f"]:{fleet.servers['changed-key'].port} " in line]
    known_hosts.write_text("\n".join(changed_line) + "\n")
    inventory = fleet.inventory(tmp_path / "inv.toml", defaults={"known_hosts": str(known_hosts)})
    args = ["fleet", "status", "--inventory", str(inventory), "--hosts", "healthy,changed-key", "--json"]
    _, report, _ = ddtreed(*args)
    assert by_name(report)["healthy"]["error"] == "unknown host key"
    assert by_name(report)["changed-key"]["error"] == "host key mismatch"
    before = known_hosts.read_text()
    _, report, _ = ddtreed(*args, "--accept-new")
    assert by_name(report)["healthy"]["ok"] is True
    assert by_name(report)["changed-key"]["error"] == "host key mismatch"  # never overwritten
    recorded = known_hosts.read_text()
    assert recorded.startswith(before)
    assert recorded[len(before):] == fleet.servers["healthy"].host_key_line + "\n"
    _, report, _ = ddtreed(*args)  # strict again: the recorded key is now known
    assert by_name(report)["healthy"]["ok"] is True


def test_incidents_merge_newest_first_with_host_column(fleet, tmp_path):
    from ddtreed.incidents import Store
    from ddtreed.incidents.connection import database_path

    for name, times in (("a", (1_700_000_100.0, 1_700_000_300.0)), ("b", (1_700_000_200.0,))):
        with Store(database_path(tmp_path / name)) as store:
            for at in times:
                store.open_incident("crash", detected_at=at, message=f"{name} at {at}")
    port = fleet.servers["healthy"].port
    extra = "".join(f'\n[[host]]\nname = "gpu-{n}"\naddress = "127.0.0.1"\nport = {port}\n'
                    f'state_dir = "{tmp_path / n}"\ntags = ["pair"]\n' for n in ("a", "b"))
    inventory = fleet.inventory(tmp_path / "inv.toml", extra_hosts=extra)
    code, report, _ = ddtreed("fleet", "incidents", "--inventory", str(inventory),
                              "--hosts", "gpu-a,gpu-b,down", "--json")
    assert code == 1 and by_name(report)["down"]["error"] == "unreachable"
    merged = [(row["host"], row["started_at"][:19]) for row in report["incidents"]]
    assert merged == [("gpu-a", "2023-11-14T22:18:20"), ("gpu-b", "2023-11-14T22:16:40"),
                      ("gpu-a", "2023-11-14T22:15:00")]
    code, table, _ = ddtreed("fleet", "incidents", "--inventory", str(inventory), "--tag", "pair")
    assert code == 0
    assert table.splitlines()[0].split()[:3] == ["HOST", "ID", "STARTED"]
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["gpu-a", "gpu-b", "gpu-a"]


def test_diagnose_remote_log(fleet, tmp_path):
    remote_log = tmp_path / "remote.log"
    shutil.copy(CORPUS_LOG, remote_log)
    code, report, _ = ddtreed("fleet", "diagnose", str(remote_log), "--inventory", str(fleet.inventory()),
                              "--hosts", "healthy,refused-key", "--json")
    assert code == 1
    found = by_name(report)["healthy"]["result"]["incidents"]
    assert [item["category"] for item in found] == ["cuda-graph-shape-mismatch"]
    assert by_name(report)["refused-key"]["error"] == "auth failed"
    _, report, _ = ddtreed("fleet", "diagnose", str(tmp_path / "missing.log"), "--inventory",
                           str(fleet.inventory()), "--hosts", "healthy", "--json")
    failed = by_name(report)["healthy"]
    assert (failed["ok"], failed["error"]) == (False, "remote command failed")
    assert failed["exit_code"] != 0 and "missing.log" in failed["detail"]


def test_rules_push_validates_before_swap_and_reloads(fleet, tmp_path):
    live = tmp_path / "live-rules"
    live.mkdir()
    (live / "old.toml").write_text((REPO / "ddtreed" / "data" / "rules" / "fallback.toml").read_text())
    daemon, state_dir = _real_daemon(tmp_path, live)
    inventory = fleet.inventory(tmp_path / "inv.toml", defaults={
        "rules_dir": str(live), "state_dir": str(state_dir)})
    try:
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "memory.toml").write_text("[[rule]\nid = 'broken'\n")
        code, report, _ = ddtreed("fleet", "rules", "push", str(bad), "--inventory", str(inventory),
                                  "--hosts", "healthy,down", "--json")
        rejected = by_name(report)["healthy"]
        assert code == 1 and rejected["error"] == "remote command failed"
        assert "rules rejected, old rules kept" in rejected["detail"] and "memory.toml:1" in rejected["detail"]
        assert sorted(p.name for p in live.iterdir()) == ["old.toml"]  # untouched, no staging left
        assert not daemon.has("reloaded")

        good = tmp_path / "good"
        shutil.copytree(REPO / "ddtreed" / "data" / "rules", good)
        code, report, _ = ddtreed("fleet", "rules", "push", str(good), "--inventory", str(inventory),
                                  "--hosts", "healthy", "--json")
        result = by_name(report)["healthy"]["result"]
        assert code == 0
        assert result["installed"] == sorted(p.name for p in good.glob("*.toml"))
        assert result["removed"] == ["old.toml"]
        assert result["reload"] == f"SIGHUP sent to pid {daemon.pid}"
        assert sorted(p.name for p in live.iterdir()) == result["installed"]
        assert (live / "memory.toml").read_bytes() == (good / "memory.toml").read_bytes()
        wait_for(lambda: daemon.has("reloaded"), 30, what="the daemon to reload the pushed rules")
    finally:
        assert daemon.stop() == 0


def _real_daemon(tmp_path: Path, rules_dir: Path):
    """A real `ddtreed run` over the rules dir the push replaces; only it may receive SIGHUP."""
    sys.path.insert(0, str(REPO / "tests" / "programs"))
    import fast_service
    from fault_harness import DaemonProcess
    from supervision_helpers import free_port

    config = fast_service.write_config(tmp_path / "run", port=free_port(), extra_args=("--disable-cuda-graph",),
                                       paths={"rules_dirs": [str(rules_dir)]})
    state_dir = tmp_path / "run" / "state"
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    wait_for(lambda: (state_dir / "ddtreed.pid").exists(), 60, what="the daemon's pid file")
    return daemon, state_dir


def test_remediate_apply_dry_run_apply_and_revert(fleet, tmp_path):
    config = tmp_path / "remote.toml"
    config.write_text('[service]\nargv = ["python", "-m", "sglang.launch_server", "--model-path", "m", '
                      '"--speculative-algorithm", "DDTREE", "--port", "30000"]\n'
                      f'[paths]\nstate_dir = "{tmp_path / "state"}"\nlog_dir = "{tmp_path / "logs"}"\n')
    inventory = fleet.inventory(tmp_path / "inv.toml", defaults={
        "config": str(config), "state_dir": str(tmp_path / "state")})
    base = ["--inventory", str(inventory), "--hosts", "healthy,changed-key", "--json"]
    _, report, _ = ddtreed("fleet", "remediate", "apply", "disable-cuda-graph", "--dry-run", *base)
    plan = by_name(report)["healthy"]["result"]
    assert plan["applicable"] is True and "+--disable-cuda-graph" in plan["diff"]
    assert by_name(report)["changed-key"]["error"] == "host key mismatch"
    _, report, _ = ddtreed("fleet", "remediate", "apply", "disable-cuda-graph", *base)
    applied = by_name(report)["healthy"]["result"]
    assert applied["applied"] is True and "--disable-cuda-graph" in applied["launch"]["argv"]
    # The remote state dir comes from the inventory; the revert finds the application there.
    revert_inventory = inventory
    code, report, _ = ddtreed("fleet", "remediate", "revert", applied["application_id"],
                              "--inventory", str(revert_inventory), "--hosts", "healthy", "--json")
    assert code == 0 and by_name(report)["healthy"]["ok"] is True
    code, report, _ = ddtreed("fleet", "remediate", "revert", "no-such-application",
                              "--inventory", str(revert_inventory), "--hosts", "healthy", "--json")
    failed = by_name(report)["healthy"]
    assert code == 1 and failed["error"] == "remote command failed" and failed["exit_code"] != 0


def test_logs_tail_current_files_only(fleet):
    log_dir = fleet.directory / "remote-logs"
    log_dir.mkdir(exist_ok=True)
    (log_dir / "service.out.log").write_text("".join(f"out {i}\n" for i in range(10)))
    (log_dir / "service.err.log").write_text("err 0\nerr 1\n")
    (log_dir / "service.out.log.1").write_text("rotated\n")
    code, report, _ = ddtreed("fleet", "logs", "--lines", "3", "--inventory", str(fleet.inventory()),
                              "--hosts", "healthy,down", "--json")
    files = by_name(report)["healthy"]["result"]["files"]
    assert code == 1 and by_name(report)["down"]["error"] == "unreachable"
    assert files == {str(log_dir / "service.err.log"): ["err 0", "err 1"],
                     str(log_dir / "service.out.log"): ["out 7", "out 8", "out 9"]}
    code, text, _ = ddtreed("fleet", "logs", "--lines", "1", "--inventory", str(fleet.inventory()),
                            "--hosts", "healthy")
    assert code == 0 and f"== healthy:{log_dir / 'service.out.log'}\nout 9" in text


def test_deadline_slow_hosts_never_stall_the_rest(fleet):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP, never sends an SSH banner
    port = silent.getsockname()[1]
    try:
        inventory = load_inventory(fleet.inventory(extra_hosts=(
            f'\n[[host]]\nname = "silent"\naddress = "127.0.0.1"\nport = {port}\n'
            f'\n[[host]]\nname = "slow-command"\naddress = "127.0.0.1"\nport = {fleet.servers["healthy"].port}\n')))
        entries = inventory.select(["healthy", "silent", "slow-command", "down"])

        def job(connection):
            seconds = "30" if connection.entry.name == "slow-command" else "0"
            return connection.run(["sleep", seconds], connection.remaining()).returncode

        started = time.monotonic()
        report = run_on_hosts(entries, job, deadline_s=2.0, concurrency=2)
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    results = {h.name: (h.ok, h.error, h.result) for h in report.hosts}
    assert results == {"healthy": (True, None, 0), "silent": (False, "timeout", None),
                       "slow-command": (False, "timeout", None), "down": (False, "unreachable", None)}
    assert elapsed < 2.0 * 2 + 2.0  # two rounds of the deadline at concurrency 2, plus slack
    assert report.hosts[0].elapsed_s < 2.0


def test_proxy_jump_through_the_healthy_host(fleet, tmp_path):
    port = fleet.servers["healthy"].port
    ssh_config = tmp_path / "ssh_config"
    # The hop by an alias of its own: OpenSSH refuses a ProxyJump naming the target's own
    # address and port ("jumphost loop"), and ddtreed resolves hosts as OpenSSH does.
    ssh_config.write_text(f"Host behind\n  HostName 127.0.0.1\n  Port {port}\n  ProxyJump root@jump\n"
                          f"Host jump\n  HostName 127.0.0.1\n  Port {port}\n")
    inventory = load_inventory(fleet.inventory(tmp_path / "inv.toml", defaults={"ssh_config": str(ssh_config)},
                                               extra_hosts='\n[[host]]\nname = "behind"\n'))
    log = fleet.servers["healthy"].log
    before = log.read_text().count("Accepted publickey")
    report = run_on_hosts(inventory.select(["behind"]),
                          lambda connection: connection.run(["echo", "through the jump"], 10).stdout)
    assert (report.hosts[0].ok, report.hosts[0].result) == (True, "through the jump\n")
    assert report.hosts[0].error is None
    deadline = time.monotonic() + 5
    while log.read_text().count("Accepted publickey") < before + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.read_text().count("Accepted publickey") == before + 2  # the hop and the target


@pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="needs ssh-agent")
def test_agent_key_is_used_when_no_identity_file(fleet, tmp_path, monkeypatch):
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(["ssh-add", "-q", str(fleet.client_key)], env=env, check=True,
                       stderr=subprocess.DEVNULL)
        inventory = fleet.inventory(tmp_path / "inv.toml", defaults={"identity_file": None})
        entries = load_inventory(inventory).select(["healthy"])
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        assert run_on_hosts(entries, lambda c: c.run(["true"], 10).returncode).hosts[0].result == 0
        monkeypatch.delenv("SSH_AUTH_SOCK")
        assert run_on_hosts(entries, lambda c: c.run(["true"], 10).returncode).hosts[0].error == "auth failed"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def test_concurrency_is_bounded(fleet):
    inventory = load_inventory(fleet.inventory(extra_hosts="".join(
        f'\n[[host]]\nname = "h{i}"\naddress = "127.0.0.1"\nport = {fleet.servers["healthy"].port}\n'
        for i in range(6))))
    active, peak, lock = [0], [0], threading.Lock()

    def job(connection):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return connection.run(["sleep", "0.3"], 10).returncode
        finally:
            with lock:
                active[0] -= 1

    report = run_on_hosts(inventory.select([f"h{i}" for i in range(6)]), job, concurrency=2)
    assert [h.result for h in report.hosts] == [0] * 6 and peak[0] == 2
