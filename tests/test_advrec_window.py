"""Adversary's test of the window record-before-diagnosis opened (71e2591): between the crash's
row commit and its diagnosis, what a person reading the state dir sees, read in that window from
outside the daemon's connection: `ddtreed incidents show` (the row: open, category unknown, not
diagnosed: not "no rule matched"), the metrics' counts (one open incident of category unknown,
which the diagnosis then moves), and the status snapshot (`ddtreed status`: nothing published
yet, no incident named: the row is not durable before the rules' answer joins it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddtreed.cli import main
from ddtreed.loop.daemon import EXIT_OK
from ddtreed.ops.status import read_status
from ddtreed.testing import crashing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loop_middle import Loop  # noqa: E402


def test_what_a_person_sees_between_the_row_and_its_diagnosis(tmp_path, capsys):
    from ddtreed.cli.status_read import incident_counts
    from ddtreed.incidents import database_path

    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    state = tmp_path / "state"
    rules = loop.daemon.rules
    diagnose = rules.diagnose
    seen: dict = {}

    def watched(crashes, context=None, *args, **kwargs):
        if not seen and not all(crash.source == "<warm-up>" for crash in crashes):
            capsys.readouterr()
            assert main(["incidents", "show", "1", "--state-dir", str(state)]) == 0
            seen["show"] = next(line for line in capsys.readouterr().out.splitlines()
                                if line.startswith("incident "))
            seen["counts"] = incident_counts(database_path(state))["incidents"]
            seen["status"] = read_status(str(state))
        return diagnose(crashes, context, *args, **kwargs)

    rules.diagnose = watched  # type: ignore[method-assign]
    assert loop.run() == EXIT_OK
    assert seen["show"] == "incident 1: open  unknown  (not diagnosed)"
    assert [(row["category"], row["status"], row["count"]) for row in seen["counts"]] == [("unknown", "open", 1)]
    status = seen["status"]
    assert status.current_incident_id is None and status.state == "starting"
    after = incident_counts(database_path(state))["incidents"]
    assert [row["category"] for row in after] == ["cuda-graph-shape-mismatch"]  # the count moved with it
