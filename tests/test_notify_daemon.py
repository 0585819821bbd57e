"""`ddtreed run` under a stand-in for systemd: a real notify socket and watchdog, the demo service
crashing and being fixed, metrics and `ddtreed status` while it serves, then SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ddtreed.config import load
from ddtreed.ops.status import read_status

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _demo_config(directory: Path, metrics_port: int) -> Path:
    from ddtreed import demo

    config = demo.prepare(directory, device="cpu", fault=None)
    text = config.read_text()
    # Preflight would prevent the founding crash; this test wants the crash → fix → serve path.
    if "[preflight]\nenabled = true" in text:
        text = text.replace("[preflight]\nenabled = true", "[preflight]\nenabled = false", 1)
    elif "[preflight]" in text:
        text = text.replace("[preflight]", "[preflight]\nenabled = false", 1)
    else:
        text += "\n[preflight]\nenabled = false\n"
    assert "[metrics]" not in text
    text += f'\n[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
    config.write_text(text)
    return config


def _receive(listener: socket.socket) -> list[str]:
    """Every datagram waiting now (one 0.2 s wait at most), split into KEY=value lines."""
    lines: list[str] = []
    while True:
        try:
            lines += listener.recv(4096).decode().split("\n")
        except socket.timeout:
            return lines


def _status_cli(state_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", "status", "--state-dir", state_dir, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.slow
def test_daemon_under_a_service_manager(tmp_path):
    port = _free_port()
    config = _demo_config(tmp_path, port)
    state_dir = load(config).paths.state_dir
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify.sock"))
    listener.settimeout(0.2)
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="2000000",
               PYTHONPATH=str(ROOT))
    with open(tmp_path / "ddtreed.out", "wb") as output:
        daemon = subprocess.Popen([sys.executable, "-m", "ddtreed", "run", "--config", str(config)],
                                  env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    log_tail = lambda: (tmp_path / "ddtreed.out").read_text()[-3000:]  # noqa: E731
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and daemon.poll() is None:
            messages += _receive(listener)
            if any(m.startswith("STATUS=serving") for m in messages):
                break
        assert any(m.startswith("STATUS=serving") for m in messages), (messages, log_tail())

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        running = _status_cli(state_dir)

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0, log_tail()
        messages += _receive(listener)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=30)
        listener.close()

    # READY long before the service served: systemd never waits for the model load.
    statuses = [m for m in messages if m.startswith("STATUS=")]
    assert messages.index("READY=1") < messages.index("STATUS=loading weights")
    assert any(s.startswith("STATUS=incident 1: applying ddtree-verify-graph-width") for s in statuses)
    assert messages.count("WATCHDOG=1") >= 2
    assert messages.index("STOPPING=1") > messages.index(next(s for s in statuses if s.startswith("STATUS=serving")))

    assert "ddtreed_service_up 1.0\n" in metrics
    assert 'ddtreed_state{state="running"} 1.0\n' in metrics
    assert 'ddtreed_incidents_total{category="cuda-graph-shape-mismatch"} 1.0\n' in metrics
    assert "ddtreed_remediations_applied_total 1.0\n" in metrics
    assert "ddtreed_last_healthy_probe_timestamp_seconds " in metrics
    assert "process_resident_memory_bytes " in metrics
    if shutil.which("promtool"):  # the real daemon's scrape passes Prometheus' own linter
        linted = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True,
                                text=True, timeout=60, check=False)
        assert linted.returncode == 0, linted.stdout + linted.stderr

    assert running.returncode == 0, running.stderr
    report = json.loads(running.stdout)
    assert report["alive"] and report["daemon"]["last_accept_length"] > 1
    assert report["incidents"]["incidents_total"] == 1

    assert read_status(state_dir).state == "stopped"
    assert _status_cli(state_dir).returncode == 3
