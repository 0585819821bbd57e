"""Item 2 of issue 16 (fixed by helper mid): a second `ddtreed run` on a state dir that a first
daemon serves from exits 2 with one line naming the holder; the first keeps serving untouched."""

from __future__ import annotations

import subprocess

import pytest
from hostile import doubled_daemons, service_config

from ddtreed.incidents import Store, database_path
from ddtreed.ops.status import read_status


@pytest.mark.slow
def test_item02_a_second_daemon_on_the_same_state_dir_exits_2_and_the_first_keeps_serving(tmp_path):
    directory = tmp_path / "run"
    config = service_config(directory, extra_args=("--disable-cuda-graph",))
    first, second = doubled_daemons(config, directory)
    try:
        try:
            code = second.process.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        status = read_status(directory / "state")
        assert code == 2, f"the second daemon exited {code}"
        output = (directory / "daemon2.jsonl").read_text().strip().splitlines()
        assert len(output) == 1 and str(first.pid) in output[0], output
        assert first.process.poll() is None and status.pid == first.pid and status.state == "running"
        with Store(database_path(directory / "state")) as store:
            assert store.list_incidents() == []
    finally:
        second.stop()
        assert first.stop() == 0
