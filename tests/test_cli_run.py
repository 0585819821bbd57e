"""`ddtreed run` as a real process in its own session: pid file, state file, SIGUSR1, SIGHUP, SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from ddtreed.demo import prepare, to_toml
from ddtreed.health.probes import Prober
from ddtreed.service.host import port_in_use
from ddtreed.paths import shipped
from ddtreed.ops.status import read_status
from tests.daemon_helpers import ROOT
from supervision_helpers import wait_for

pytestmark = pytest.mark.slow

BROKEN_RULE = '[[rule]]\nid = "operator-typo"\ncategory = "other"\ntitle = "x"\npriority = "high"\n'
FIXED_RULE = '''[[rule]]
id = "operator-added-rule"
category = "other"
title = "A rule an operator added while the daemon ran"
meaning = "Only here to prove that a corrected file is picked up on SIGHUP."
priority = 2
diagnosis = "An operator rule matched."
[rule.match]
exception = ["OperatorTestError"]
'''


class RunningDaemon:
    """`ddtreed run --config F --log-format json`, stdout (the structured log) into a file."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.rules_dir = directory / "rules"
        shutil.copytree(shipped("rules"), self.rules_dir)
        config_path = prepare(directory / "demo", tp=1, device="cpu", load_seconds=0.3)
        tables = tomllib.loads(config_path.read_text())
        tables["paths"]["rules_dirs"] = [str(self.rules_dir)]
        config_path.write_text(to_toml(tables))
        self.state_dir = Path(tables["paths"]["state_dir"])
        self.port = tables["service"]["port"]
        self.log = directory / "ddtreed.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ddtreed", "run", "--config", str(config_path), "--log-format", "json"],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)

    def events(self, name: str) -> list[dict]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == name:
                found.append(event)
        return found

    def wait_event(self, name: str, count: int = 1, timeout: float = 20.0) -> dict:
        return wait_for(lambda: len(self.events(name)) >= count and self.events(name)[count - 1],
                        timeout, what=f"{name!r} event #{count} in {self.log}")

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the daemon, and the service tree it started in a session of its own (a killed
        ddtreed leaves it serving, by design): a module cut short must not leave it running."""
        status = read_status(self.state_dir)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        if status and status.service_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(status.service_pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    running = RunningDaemon(tmp_path_factory.mktemp("run"))
    try:
        wait_for(lambda: (s := read_status(running.state_dir)) and s.state == "running" and s,
                 90, what="state running in daemon-state.json")
        yield running
    finally:
        running.kill()


def test_pid_file_and_state_file_say_running_with_the_accept_length(daemon):
    pid_file = daemon.state_dir / "ddtreed.pid"
    assert pid_file.read_text().strip() == str(daemon.process.pid)
    status = read_status(daemon.state_dir)
    assert status.pid == daemon.process.pid
    assert status.state == "running"
    assert status.last_accept_length and status.last_accept_length > 1.5
    assert "accept len" in status.status_text
    assert psutil.Process(status.service_pid).is_running()


def test_sigusr1_logs_a_state_dump(daemon):
    daemon.signal(signal.SIGUSR1)
    dump = daemon.wait_event("state_dump")
    assert dump["state"] == "running"
    assert dump["service_pid"] == read_status(daemon.state_dir).service_pid
    assert any("ddtreed.demo.server" in token for token in dump["argv"])


def test_sighup_with_a_broken_rule_keeps_the_old_rules_then_a_fixed_file_reloads(daemon):
    service_pid = read_status(daemon.state_dir).service_pid
    (daemon.rules_dir / "zz-operator.toml").write_text(BROKEN_RULE)
    daemon.signal(signal.SIGHUP)
    rejected = daemon.wait_event("reload_rejected")
    assert "zz-operator.toml" in rejected["error"]
    # Still serving with the old set: the same service process answers a real generation.
    assert daemon.process.poll() is None
    prober = Prober(f"http://127.0.0.1:{daemon.port}")
    assert prober.generate("The capital of France is", 4, time.monotonic() + 20).ok
    assert read_status(daemon.state_dir).service_pid == service_pid

    (daemon.rules_dir / "zz-operator.toml").write_text(FIXED_RULE)
    daemon.signal(signal.SIGHUP)
    reloaded = daemon.wait_event("reloaded")
    shipped_count = sum(path.read_text().count("[[rule]]") for path in Path(shipped("rules")).glob("*.toml"))
    assert reloaded["rules"] == shipped_count + 1
    assert read_status(daemon.state_dir).service_pid == service_pid


def test_sigterm_stops_the_service_tree_and_exits_0(daemon):
    status = read_status(daemon.state_dir)
    tree = [psutil.Process(status.service_pid)]
    tree += tree[0].children(recursive=True)
    assert len(tree) >= 2  # the launcher and its rank worker
    daemon.signal(signal.SIGTERM)
    assert daemon.process.wait(30) == 0
    wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree),
             10, what="the service tree to be gone")
    assert not port_in_use("127.0.0.1", daemon.port)
    assert not (daemon.state_dir / "ddtreed.pid").exists()
    assert read_status(daemon.state_dir).state == "stopped"
    assert daemon.events("stop_requested")[0]["signal"] == "SIGTERM"
