"""Issue 19 lever 2: the incident row is the first write after a crash is read; the `crashed` and
`diagnosing` status snapshots follow it (they are not on the path to the row)."""

from __future__ import annotations

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.ops.status import read_status
from test_loop_middle import Loop, fixed_by


def test_the_incident_row_is_written_before_the_crashed_status(tmp_path):
    loop = Loop(tmp_path, fixed_by("--disable-cuda-graph"))
    store, seen = loop.daemon.store, []
    original = store.open_incident

    def open_incident(*args, **kwargs):
        seen.append(("open_incident", loop.daemon.lifecycle.state, read_status(tmp_path / "state").state))
        incident_id = original(*args, **kwargs)
        seen.append(("opened", loop.daemon.lifecycle.state, read_status(tmp_path / "state").state))
        return incident_id

    store.open_incident = open_incident
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    assert outcome.status == "resolved"
    # the status file and the lifecycle still said what they said before the crash (it crashed
    # while starting): nothing was written before the row
    assert [entry[1:] for entry in seen] == [("starting", "starting"), ("starting", "starting")]
    history = loop.daemon.lifecycle.history
    assert history[history.index("crashed"):][:3] == ["crashed", "diagnosing", "remediating"]
    assert loop.steps(outcome.incident_id)[:2] == ["detected", "diagnosed"]
