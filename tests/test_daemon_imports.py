"""What the daemon's process loads (issue 19: RSS ≤ 40 MB): the /metrics exposition and the webhook
client are imported only by a daemon configured to use them (their deliveries and scrapes are
tested in test_notify*.py and test_metrics.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("prometheus_client", "urllib.request", "http.client", "http.server", "email")


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_daemon_modules_leave_metrics_and_webhooks_unloaded():
    loaded = loaded_after("import ddtreed.cli.run_cmd, ddtreed.loop.daemon, ddtreed.ops.logsetup, ddtreed.ops.notify")
    assert "ddtreed.loop.daemon" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
