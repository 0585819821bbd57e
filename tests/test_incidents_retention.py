"""Issue 19.3: [incidents] keep / max_age_days prune the incident database while the daemon runs.

Real SQLite files through the real Store; the daemon is the real loop on the middle tier's fake
host and fake clock (ddtreed.testing), so "an hour later" is events on the fake clock, not a wait.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ddtreed.cli import main
from ddtreed.config import from_mapping
from ddtreed.loop.daemon import EXIT_OK, Daemon
from ddtreed.incidents import Store, database_path
from ddtreed.incidents.retention import DAY_S, Retention, prune
from ddtreed.ops.notify import Notifier
from ddtreed.records import Application
from ddtreed.testing import FakeClock, FakeHost, healthy
from ddtreed.loop.wiring import build

ROOT = Path(__file__).resolve().parent.parent
ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target", "--port", "30000"]


def closed(store: Store, at: float, status: str = "resolved") -> int:
    incident_id = store.open_incident("crash", detected_at=at)
    store.finish(incident_id, status, "restarted; healthy", at=at + 30)
    return incident_id


def ids(store: Store) -> set[int]:
    return {row["id"] for row in store.list_incidents(limit=100_000)}


def test_prune_never_takes_open_unacknowledged_escalations_or_applied_fixes(tmp_path):
    now = 1_800_000_000.0
    old = now - 200 * DAY_S
    with Store(database_path(tmp_path)) as store:
        aged = [closed(store, old + n) for n in range(5)]
        still_open = store.open_incident("crash", detected_at=old)
        escalated = closed(store, old, "escalated")
        acknowledged = closed(store, old, "escalated")
        store.add_step(acknowledged, "acknowledged", "by sre: GPU replaced")
        patched = closed(store, old)
        store.record_application(patched, Application("a1", "fix", "patch", "/site", "patched x"))
        recent = [closed(store, now - 3600 + n) for n in range(5)]
        assert prune(store, keep=10_000, max_age_s=180 * DAY_S, now=now) == 6  # the aged + acknowledged
        assert ids(store) == {still_open, escalated, patched, *recent}
        assert prune(store, keep=2, now=now) == 3  # by count: the newest two stay
        assert ids(store) == {still_open, escalated, patched, *recent[-2:]}
        assert store.db.execute("SELECT COUNT(*) FROM steps WHERE incident_id NOT IN "
                                "(SELECT id FROM incidents)").fetchone()[0] == 0
        assert store.counts()["incidents_total"] == 5
        assert prune(store, keep=0, max_age_s=None, now=now) == 0  # both limits off: nothing
    del aged


def test_a_backlog_is_pruned_in_batches_then_hourly(tmp_path):
    clock = FakeClock()
    now = clock.time()
    with Store(database_path(tmp_path)) as store:
        for n in range(35):
            closed(store, now - 365 * DAY_S + n)
        settings = from_mapping({"service": {"argv": ["x"]}, "incidents": {"max_age_days": 30}}).incidents
        retention = Retention(lambda: store, lambda: settings, clock, batch=10)
        assert [retention.tick() for _ in range(5)] == [10, 10, 10, 5, 0]  # the 5th: not due
        assert len(retention.runs) == 4
        closed(store, clock.time() - 365 * DAY_S)
        clock.sleep(3599)
        assert retention.tick() == 0 and len(retention.runs) == 4
        clock.sleep(1)
        assert retention.tick() == 1


def test_the_daemon_prunes_at_start_and_hourly(tmp_path):
    """The real loop: old incidents go at the first turn; ones added later at the next interval."""
    clock = FakeClock()
    state = tmp_path / "state"
    path = database_path(state)
    old = clock.time() - 200 * DAY_S
    with Store(path) as store:
        for n in range(20):
            closed(store, old + n)
        escalated = closed(store, old, "escalated")
        recent = closed(store, clock.time() - 60)
    config = from_mapping({
        "service": {"argv": ARGV},
        "paths": {"log_dir": str(tmp_path / "logs"), "state_dir": str(state)},
        "preflight": {"enabled": False}, "canary": {"enabled": False},
        "incidents": {"keep": 10_000, "max_age_days": 180},
    }, source=str(tmp_path / "ddtreed.toml"))
    host = FakeHost(lambda argv, env, start: healthy(), clock)
    daemon = Daemon(config, wiring=build(config, host=host, clock=clock, prober=host.prober),
                    notifier=Notifier(None))
    daemon.retention.interval_s = 600.0  # ten fake minutes: fewer loop turns to simulate
    start = clock.monotonic()
    later: list[int] = []
    seen: dict[str, int] = {}

    def add_old_ones() -> None:
        with Store(path) as other:  # another connection, as `ddtreed` CLI or a restore would be
            later.extend(closed(other, old + 100 + n) for n in range(3))

    def look(name: str) -> None:
        with Store(path) as other:
            seen[name] = len(ids(other) & set(later))

    clock.at(start + 120, add_old_ones)
    clock.at(start + 300, lambda: look("before the next interval"))
    clock.at(start + 1500, lambda: look("after it"))
    clock.at(start + 1600, daemon.request_stop)
    assert daemon.run() == EXIT_OK
    assert seen == {"before the next interval": 3, "after it": 0}
    runs = daemon.retention.runs
    assert runs[0][0] - start < 60 and runs[0][1] == 20  # at start: the 20 aged ones
    assert [deleted for _at, deleted in runs] == [20, 3, 0]  # start, +10 min, +20 min
    assert all(later_at - earlier_at >= 600.0 for (earlier_at, _), (later_at, _) in zip(runs, runs[1:]))
    with Store(path) as store:
        assert ids(store) == {escalated, recent}  # the unacknowledged escalation stays


def test_ack_lets_retention_take_an_escalation(tmp_path, capsys):
    with Store(database_path(tmp_path)) as store:
        escalated = closed(store, 1000.0, "escalated")
    capsys.readouterr()  # the test's own Store logged its migrations
    assert main(["incidents", "ack", str(escalated), "--note", "GPU 3 replaced",
                 "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"incident {escalated} (escalated): acknowledged\n"
    with Store(database_path(tmp_path)) as store:
        [step] = [s for s in store.get(escalated)["steps"] if s["step"] == "acknowledged"]
        assert step["detail"].endswith(": GPU 3 replaced") and step["data"]["note"] == "GPU 3 replaced"
        assert prune(store, keep=0, max_age_s=DAY_S, now=1000.0 + 2 * DAY_S) == 1
    assert main(["incidents", "ack", "999", "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"ddtreed: error: {database_path(tmp_path)}: no incident 999\n"


def test_a_bad_retention_key_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "ddtreed.toml"
    config.write_text('[service]\nargv = ["python3", "-m", "sglang.launch_server"]\n'
                      f'[paths]\nstate_dir = "{tmp_path / "state"}"\nlog_dir = "{tmp_path / "logs"}"\n'
                      '[incidents]\nkeep = -5\n')
    done = subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == f"ddtreed: error: {config}: incidents.keep must be >= 0 (0: no limit), got -5\n"
