"""100 rotations (rename + new file, and copytruncate) while a writer writes tracebacks:
the follower and assembler see each traceback exactly once."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from ddtreed.logs import Follower
from ddtreed.tracebacks import Assembler

ROTATIONS = 100
PER_ROUND = 3


def traceback_text(round_index: int, item: int) -> str:
    return (f"[2026-07-28 10:00:00 TP{item}] Scheduler hit an exception: Traceback (most recent call last):\n"
            f'  File "/v/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 9, in run_batch\n'
            f"    self.run()\n"
            f"RuntimeError: crash {round_index}-{item}\n\n"
            f"[2026-07-28 10:00:00 TP0] Decode batch, #running-req: {item}, accept len: 3.00\n")


class Writer(threading.Thread):
    def __init__(self, path: str, seen_sync: set[str]):
        super().__init__(daemon=True)
        self.path, self.seen_sync, self.error = path, seen_sync, None

    def append(self, text: str) -> None:
        with open(self.path, "a") as handle:
            handle.write(text)

    def run(self) -> None:
        try:
            for round_index in range(ROTATIONS):
                for item in range(PER_ROUND):
                    self.append(traceback_text(round_index, item))
                if round_index % 2 == 0:
                    os.rename(self.path, f"{self.path}.{round_index}")  # the next append creates it anew
                else:
                    self.copytruncate(round_index)
        except Exception as error:  # surfaced by the test thread
            self.error = error

    def copytruncate(self, round_index: int) -> None:
        # copytruncate loses what nobody read before the truncate (logrotate says so too):
        # wait until the follower has read up to a sync line, as a reader keeping up would.
        marker = f"[2026-07-28 10:00:00] sync {round_index}"
        self.append(marker + "\n")
        deadline = time.monotonic() + 10
        while marker not in self.seen_sync:
            if time.monotonic() > deadline:
                raise TimeoutError(marker)
            time.sleep(0.001)
        shutil.copy(self.path, f"{self.path}.{round_index}")
        os.truncate(self.path, 0)


@pytest.mark.slow
def test_hundred_rotations_no_traceback_missed_or_duplicated(tmp_path):
    path = str(tmp_path / "service.log")
    seen_sync: set[str] = set()
    writer = Writer(path, seen_sync)
    assembler = Assembler(settle_s=0.2)
    crashes = []
    open(path, "w").close()  # a file created and renamed away between two reads is never seen
    with Follower([path]) as follower:
        writer.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for chunk in follower.read():
                seen_sync.update(line for line in chunk.lines if "] sync " in line)
                assembler.feed(chunk)
            crashes += [c for group in assembler.take(time.time()) for c in group]
            if not writer.is_alive() and not follower.wait(0):
                break
            follower.wait(0.02)
        writer.join(5)
    assert writer.error is None
    crashes += [c for group in assembler.take(time.time(), final=True) for c in group]
    messages = [c.message for c in crashes]
    expected = [f"crash {r}-{i}" for r in range(ROTATIONS) for i in range(PER_ROUND)]
    missing = sorted(set(expected) - set(messages), key=lambda m: [int(x) for x in m[6:].split("-")])
    assert not missing, f"{len(missing)} missing: {missing[:20]}"
    assert sorted(messages) == sorted(expected)  # none twice
    assert {c.rank for c in crashes} == {f"TP{i}" for i in range(PER_ROUND)}
