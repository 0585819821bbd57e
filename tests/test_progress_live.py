"""Issue 17.3, end to end: the real `ddtreed run` on the demo service (founding bug, slow load).

Before: nothing in `status` during a long load; silence for the whole verification window; the
`healthy` step written at the end of the window; `last healthy` never refreshed while serving.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

from fault_harness import DaemonProcess  # noqa: E402
from supervision_helpers import wait_for  # noqa: E402

from ddtreed import demo  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WINDOW_S = 8.0
PORT = [0]

pytestmark = pytest.mark.slow


def status_json(state: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "ddtreed", "status", "--state-dir", str(state), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)


def test_progress_healthy_step_and_fresh_last_healthy(tmp_path):
    PORT[0] = demo.free_port()
    config = demo.prepare(tmp_path / "demo", load_seconds=12.0, port=PORT[0])
    text = config.read_text().replace("verify_window_s = 3.0", f"verify_window_s = {WINDOW_S}")
    config.write_text(text + "\n[preflight]\nenabled = false\n")  # the crash path, not the prevented one
    state = tmp_path / "demo" / "state"
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    seen_startup, seen_watch = [], []

    def look() -> bool:
        snapshot = read_status(state)
        progress = snapshot.progress if snapshot else None
        if progress and progress.get("phase"):
            seen_startup.append(progress)
        if progress and progress.get("watching_until"):
            seen_watch.append(progress)
        return daemon.has("incident_resolved")

    try:
        wait_for(look, 240, interval=0.1, what="the founding loop to close")
        assert seen_startup, "no startup progress was ever published"
        first = seen_startup[0]
        assert first["budget_s"] == 90.0 and re.match(r"starting: .+, \d+ s of 90 s", first["text"])
        assert seen_watch, "the verification window was never shown"
        assert seen_watch[0]["text"].startswith(f"healthy; watching {int(WINDOW_S)} s for recurrence")
        assert [e for e in daemon.events("startup_progress")], "startup progress was not logged"
        assert daemon.events("watching_for_recurrence")
        # The healthy step is the moment the probes passed: the window came after it.
        with Store(database_path(state)) as store:
            [incident] = store.list_incidents()
            steps = {s["step"]: s["at"] for s in store.get(incident["id"])["steps"]}
        assert steps["verified"] - steps["healthy"] >= WINDOW_S - 0.5
        # Serving: `last healthy` keeps moving (the serving watch's probes, ddtreed/health/serving.py).
        before = read_status(state).last_healthy_at

        def served_and_seen() -> bool:
            body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{PORT[0]}/generate", method="POST", data=body,
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=30).read()
            return (read_status(state).last_healthy_at or 0) > before

        wait_for(served_and_seen, 90, interval=1.0, what="last healthy to follow the served requests")
        shown = status_json(state)
        assert shown["seconds_since_last_healthy"] is not None and shown["seconds_since_last_healthy"] < 60
    finally:
        assert daemon.stop() == 0
