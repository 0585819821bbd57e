"""Issue 19.3: `ddtreed incidents` and `incidents show` read through the stdlib reader
(`incidents.reads.Reader`, no sqlite-utils, no structlog) and print what the store returns.

Every check runs the real `python -m ddtreed …` process on a real SQLite file written by the real
`Store` (several incidents: a resolved patch, a crash loop with recurrences, evidence and a frozen
signature, a reverted argv change, a canary, a preflight finding, an observed crash), and
compares its stdout byte for byte with the store's own answer rendered by the same views.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_start import heavy, imported
from test_incidents_support import (FOUNDING_CONTEXT, FOUNDING_MATCH, FOUNDING_SIGNATURE, founding_crashes,
                                    record_founding)

from ddtreed.cli.common import table
from ddtreed.cli.incidents_cmd import STATUSES
from ddtreed.incidents import MIGRATIONS, Store, StoreError, database_path
from ddtreed.incidents.reads import SCHEMA, Reader
from ddtreed.incidents.stderr_tail import evidence
from ddtreed.incidents.views import TABLE_HEADERS, as_json, render_incident, table_rows
from ddtreed.records import INCIDENT_STATUSES, Application, LaunchChange, RuleMatch, ServiceContext

ROOT = Path(__file__).resolve().parent.parent
T = 1_700_000_000.0


def record_varied(store: Store) -> None:
    record_founding(store, detected_at=T)
    said = evidence(["loading", "Traceback (most recent call last):", '  File "x.py", line 3',
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"] * 15,
                    exit_code=1, phase="graph-capture", stderr_path="/var/log/sglang.err")
    loop = store.open_incident("crash", founding_crashes(2), FOUNDING_SIGNATURE, FOUNDING_MATCH,
                               FOUNDING_CONTEXT, detected_at=T + 500, service="kimi", evidence=said)
    store.add_step(loop, "diagnosed", "two ranks\nsecond line of the diagnosis", at=T + 500.5)
    store.record_recurrence(loop, "the same crash again", said, at=T + 530)
    store.record_recurrence(loop, "and again", None, at=T + 560)
    store.freeze(FOUNDING_SIGNATURE.fingerprint, "crash loop", loop)
    store.add_step(loop, "escalated", "no remediation left to try", at=T + 561)
    store.finish(loop, "escalated", "no remediation left to try", at=T + 562)
    match = RuleMatch(rule_id="oom-graph", category="cuda-oom", title="OOM in capture",
                      diagnosis="capture needs <n> GiB", advice="lower it", remediations=("cuda-graph-max-bs",),
                      params={"gib": 2})
    argv = ("python", "-m", "sglang.launch_server", "--cuda-graph-max-bs", "256", "--tp", "8")
    args = store.open_incident("crash", founding_crashes(1), FOUNDING_SIGNATURE, match,
                               ServiceContext(argv=argv), detected_at=T + 900)
    store.record_application(args, Application(
        application_id="app-2", remediation_id="cuda-graph-max-bs", kind="args", target="launch",
        summary="smaller graphs", applied_at=T + 901,
        launch=LaunchChange(argv=argv[:4] + ("128", "--tp", "8", "--disable-radix-cache"), env={},
                            description="bs 128")))
    store.mark_application("app-2", "reverted")
    store.set_remediation(args, "cuda-graph-max-bs", "app-2")
    store.finish(args, "reverted", "did not hold", at=T + 960)
    store.open_incident("canary", (), message="output diverged at token 3", detected_at=T + 1200)
    store.open_incident("preflight", (), message="flag --x is unknown", detected_at=T + 1300, service="kimi")
    observed = store.open_incident("crash", founding_crashes(1), detected_at=T + 1400)
    store.add_step(observed, "observed", "seen", {"tracebacks": 1}, at=T + 1401)
    store.finish(observed, "observed", "seen", at=T + 1401)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    with Store(database_path(directory)) as store:
        record_varied(store)
    return directory


def ddtreed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": ""})


def json_line(value) -> str:
    """What `print_json` writes."""
    return json.dumps(value, indent=None, sort_keys=False, default=str) + "\n"


LISTS = [((), {}), (("--status", "open,escalated"), {"status": ("open", "escalated")}),
         (("--limit", "2"), {"limit": 2}), (("--since", "2023-11-14T22:28:20Z"), {"since": T + 900})]


@pytest.mark.parametrize("args, query", LISTS, ids=["all", "status", "limit", "since"])
def test_the_list_is_the_stores_list_byte_for_byte(state, args, query):
    with Store(database_path(state)) as store:
        rows = store.list_incidents(**{"limit": 50, **query})
    assert len(rows) >= 2
    text = ddtreed("incidents", "--state-dir", str(state), *args)
    assert text.returncode == 0, text.stderr
    assert text.stdout == table(table_rows(rows), TABLE_HEADERS) + "\n"
    assert text.stderr == ""
    machine = ddtreed("incidents", "--state-dir", str(state), "--json", *args)
    assert machine.returncode == 0, machine.stderr
    assert machine.stdout == json_line(as_json(rows))


def test_show_is_the_stores_incident_byte_for_byte(state):
    with Store(database_path(state)) as store:
        incidents = {row["id"]: store.get(row["id"]) for row in store.list_incidents(limit=100)}
    assert len(incidents) == 6
    assert incidents[2]["recurrences"] == 2 and incidents[2]["evidence"] and incidents[2]["frozen"]
    assert incidents[3]["applications"][0]["kind"] == "args"
    for incident_id, incident in incidents.items():
        text = ddtreed("incidents", "show", str(incident_id), "--state-dir", str(state))
        assert text.returncode == 0, text.stderr
        assert text.stdout == render_incident(incident) + "\n", incident_id
        machine = ddtreed("incidents", "--state-dir", str(state), "show", str(incident_id), "--json")
        assert machine.returncode == 0, machine.stderr
        assert machine.stdout == json_line(as_json(incident)), incident_id
    assert "--cuda-graph-max-bs 256 → 128" in ddtreed("incidents", "show", "3", "--state-dir", str(state)).stdout


@pytest.mark.parametrize("args", [["incidents"], ["incidents", "--json"], ["incidents", "show", "2"],
                                  ["incidents", "show", "1", "--json"]], ids=["list", "json", "show", "show-json"])
def test_the_readers_import_neither_sqlite_utils_nor_structlog(tmp_path, state, args):
    code, modules, out = imported(tmp_path, *args, "--state-dir", str(state))
    assert code == 0 and out
    assert heavy(modules) == []
    assert not [m for m in modules if m.startswith(("ddtreed.incidents.store", "ddtreed.incidents.connection",
                                                    "ddtreed.ops.logsetup", "ddtreed.records"))]


def test_an_unknown_id_and_garbage_are_the_stores_one_line_errors(state, tmp_path):
    done = ddtreed("incidents", "show", "42", "--state-dir", str(state))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"ddtreed: error: no incident 42 in {database_path(state)}\n"
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    database_path(garbage).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as refused:
        Store(database_path(garbage), create=False, read_only=True)
    for args in (["incidents"], ["incidents", "show", "1"]):
        done = ddtreed(*args, "--state-dir", str(garbage))
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == f"ddtreed: error: {refused.value}\n"
        assert "not a valid ddtreed database" in done.stderr


def test_a_database_of_an_older_schema_is_migrated_and_read_as_before(state, tmp_path):
    """The reader refuses it (`outdated`, like `Store(read_only=True)`); the CLI then opens it
    through the store, which migrates it, and prints the same list."""
    old = tmp_path / "old"
    shutil.copytree(state, old)
    with sqlite3.connect(database_path(old)) as db:  # as before 0009 (its indexes, the counts table)
        for kind, name in db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'index') "
                                     "AND (name LIKE 'incident_counts%' OR name LIKE 'incidents_%started')").fetchall():
            db.execute(f"DROP {kind.upper()} {name}")
        db.execute("DROP TABLE incident_counts")
        db.execute("DELETE FROM _migrations WHERE name = ?", [SCHEMA[-1]])
    with pytest.raises(StoreError) as refused:
        Reader(database_path(old))
    assert refused.value.reason == "outdated"
    done = ddtreed("incidents", "--json", "--state-dir", str(old))
    assert done.returncode == 0, done.stderr
    with Store(database_path(state)) as store:
        assert done.stdout == json_line(as_json(store.list_incidents()))
    with Reader(database_path(old)) as reader:  # migrated now
        assert len(reader.list_incidents()) == 6


def test_the_reader_sees_what_a_live_store_committed(tmp_path):
    """The daemon's connection open, its commits still in the WAL: the reader sees them."""
    path = database_path(tmp_path / "live")
    with Store(path) as store:
        first = store.open_incident("crash", founding_crashes(1), FOUNDING_SIGNATURE, FOUNDING_MATCH,
                                    detected_at=T)
        assert (tmp_path / "live" / "incidents.sqlite3-wal").stat().st_size > 0
        with Reader(path) as reader:
            assert [row["id"] for row in reader.list_incidents()] == [first]
            store.add_step(first, "diagnosed", "later", at=T + 1)
            assert [step["step"] for step in reader.get(first)["steps"]] == ["detected", "diagnosed"]
            assert reader.get(first) == store.get(first)
        with pytest.raises(StoreError) as missing:
            Reader(tmp_path / "nowhere" / "incidents.sqlite3")
        assert missing.value.reason == "missing"


def test_the_readers_vocabularies_are_the_stores():
    assert SCHEMA == tuple(name for name, _function in MIGRATIONS)
    assert STATUSES == INCIDENT_STATUSES
