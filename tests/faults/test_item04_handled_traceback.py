"""Item 4 of issue 16 (fixed by helper mid): a handled traceback in a live, healthy server is not a
crash: ddtreed never stops the service for it (at most an `observed` incident)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hostile import DaemonProcess, service_config, wait_for

from ddtreed.incidents import Store, database_path
from ddtreed.ops.status import read_status

SERVICE = Path(__file__).resolve().parent / "asgi_handled_service.py"
HANDLED = 5


@pytest.mark.slow
def test_item04_five_handled_asgi_tracebacks_leave_the_healthy_service_running(tmp_path):
    directory = tmp_path / "run"
    marks = tmp_path / "handled.txt"
    site, repo = directory.resolve() / "site-packages", Path(__file__).resolve().parents[2]
    config = service_config(directory, extra_args=("--disable-cuda-graph",), service={"env": {
        "PYTHONPATH": f"{site}:{repo}", "PYTHONUNBUFFERED": "1", "DDTREED_TEST_MARKS": str(marks)}})
    text = config.read_text().replace(str(Path(sys.modules["fast_service"].__file__).resolve()), str(SERVICE), 1)
    assert str(SERVICE) in text
    config.write_text(text)
    state_dir = directory / "state"
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: (read_status(state_dir) or None) and read_status(state_dir).state == "running", 60,
                 what="the service to serve")
        service_pid = read_status(state_dir).service_pid
        wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) >= HANDLED, 60,
                 what=f"{HANDLED} handled tracebacks")
        wait_for(lambda: daemon.has("service.stopping") or len(marks.read_text().splitlines()) >= HANDLED + 3,
                 60, what="the daemon to have read them")
        status = read_status(state_dir)
        assert not daemon.has("service.stopping"), "ddtreed stopped a healthy service"
        assert status.state == "running" and status.service_pid == service_pid
    finally:
        assert daemon.stop() == 0
    with Store(database_path(state_dir)) as store:
        statuses = {incident["status"] for incident in store.list_incidents(limit=100)}
    assert statuses <= {"observed"}, statuses
