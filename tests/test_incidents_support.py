"""Shared builders for the incident-store tests: real records, a founding-style incident, and a
second process that holds a lock on the database until told to let go."""

from __future__ import annotations

import select
import subprocess
import sys
import time

from ddtreed.records import Application, Crash, FileChange, Frame, RuleMatch, ServiceContext, Signature

FOUNDING_MESSAGE = ("The size of tensor a (8) must match the size of tensor b (33) "
                    "at non-singleton dimension 0")


def founding_crashes(ranks: int = 8) -> tuple[Crash, ...]:
    frames = (
        Frame("/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", 2009,
              "run_scheduler_process"),
        Frame("/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py",
              512, "replay_prepare"),
    )
    return tuple(
        Crash(kind="traceback", exception="RuntimeError", message=FOUNDING_MESSAGE, frames=frames,
              rank=f"TP{rank}", prefix="Scheduler hit an exception", source="/var/log/sglang.log",
              first_line=100 + rank, last_line=130 + rank,
              excerpt=tuple(f"[TP{rank}] line {n}" for n in range(30)))
        for rank in range(ranks))


FOUNDING_SIGNATURE = Signature(fingerprint="f0und1ng", exception="RuntimeError",
                               normalized_message="The size of tensor a (<n>) must match ...",
                               frames=("sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare",),
                               params={"n0": 8, "n1": 33, "n2": 0})
FOUNDING_MATCH = RuleMatch(
    rule_id="ddtree-verify-graph-width", category="cuda-graph-shape-mismatch",
    title="DDTree verify CUDA graph captured at the block size",
    diagnosis="The target verify graph was captured 8 wide (block size); DDTree verifies "
              "budget + 1 = 33 tokens per request.",
    remediations=("ddtree-verify-graph-width", "disable-cuda-graph"), params={"a": 8, "b": 33},
    precise=True)
FOUNDING_CONTEXT = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32,
                                  tp_size=8, model_path="/models/target",
                                  draft_model_path="/models/draft")


def patch_application(application_id: str = "app-1", applied_at: float = 0.0) -> Application:
    change = FileChange(
        path="/opt/venv/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py",
        before_sha256="a" * 64, after_sha256="b" * 64, backup_path="/var/lib/ddtreed/backups/x")
    return Application(application_id=application_id, remediation_id="ddtree-verify-graph-width",
                       kind="patch", target="/opt/venv/lib/python3.11/site-packages",
                       summary="target verify graph captures budget + 1 tokens per request",
                       files=(change,), applied_at=applied_at)


def record_founding(store, detected_at: float = 1_700_000_000.0) -> int:
    """The founding incident's whole loop, with known times: resolved after 70 s."""
    t = detected_at
    incident_id = store.open_incident("crash", founding_crashes(), FOUNDING_SIGNATURE,
                                      FOUNDING_MATCH, FOUNDING_CONTEXT, detected_at=t)
    store.add_step(incident_id, "diagnosed", FOUNDING_MATCH.diagnosis, at=t + 0.25)
    store.record_application(incident_id, patch_application(applied_at=t + 1.0))
    store.add_step(incident_id, "applied", "patched cuda_graph_runner.py", at=t + 1.0)
    store.add_step(incident_id, "restarting", "", at=t + 2.0)
    store.add_step(incident_id, "restarted", "pid 4242", at=t + 3.0)
    store.add_step(incident_id, "healthy", "accept length 3.10", {"accept_length": 3.1}, at=t + 62.0)
    store.set_remediation(incident_id, "ddtree-verify-graph-width", "app-1")
    store.mark_application("app-1", "verified")
    store.finish(incident_id, "resolved", "ddtree-verify-graph-width held", at=t + 70.0)
    return incident_id


# A second process that opens the database with plain sqlite3, takes a lock and holds it until a
# line arrives on stdin. It prints "held <rows>" once the lock is taken.
HOLDER = r"""
import sqlite3, sys
path, mode = sys.argv[1], sys.argv[2]
connection = sqlite3.connect(path, isolation_level=None, timeout=10)
if mode == "read":
    connection.execute("BEGIN")
    rows = connection.execute("SELECT COUNT(*) FROM incidents").fetchone()[0]
elif mode == "write":
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("INSERT INTO incidents (source, category, status, started_at) "
                       "VALUES ('crash', 'uncommitted', 'open', 1)")
    rows = -1
elif mode == "exclusive-mode":
    connection.execute("PRAGMA locking_mode = EXCLUSIVE")
    connection.execute("BEGIN EXCLUSIVE")
    connection.execute("UPDATE incidents SET outcome = outcome")
    connection.execute("COMMIT")  # exclusive locking mode keeps the lock after the commit
    rows = -1
print("held", rows, flush=True)
sys.stdin.readline()
if mode == "read":
    rows = connection.execute("SELECT COUNT(*) FROM incidents").fetchone()[0]
    print("still", rows, flush=True)
    connection.execute("COMMIT")
elif mode == "write":
    connection.execute("ROLLBACK")
connection.close()
print("released", flush=True)
"""


class Holder:
    """A real second process holding a lock on the database (see HOLDER)."""

    def __init__(self, path, mode: str):
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.rows = int(self.expect("held").split()[1])

    def expect(self, word: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], deadline - time.monotonic())
            if ready:
                line = self.process.stdout.readline()
                if line.startswith(word):
                    return line
                if not line:
                    break
        raise AssertionError(f"holder did not say {word!r} (exit {self.process.poll()})")

    def release(self) -> str:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        last = self.expect("still") if self.rows >= 0 else ""
        self.expect("released")
        assert self.process.wait(timeout=20) == 0
        return last

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)
