"""After the warm-up freezes the heap, the C heap's free pages go back to the system.

Loading the rules compiles every pattern once to check it and drops the program; the allocator
keeps those pages mapped. `release_freed_heap` (glibc's `malloc_trim(0)`) hands them back; it is
called by `freeze_heap`, which the warm-up runs once per rule set."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from ddtreed.loop import warmup


def test_freeze_heap_releases_the_freed_heap(monkeypatch):
    calls = []
    monkeypatch.setattr(warmup, "release_freed_heap", lambda: calls.append(1) or True)
    try:
        assert warmup.freeze_heap() > 0
    finally:
        warmup.thaw_heap()
    assert calls == [1]


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_pages_go_back_to_the_system_on_glibc():
    # In a fresh process: many small blocks allocated, then freed, stay mapped until the trim.
    script = (
        "import psutil\n"
        "from ddtreed.loop.warmup import release_freed_heap\n"
        "rss = lambda: psutil.Process().memory_info().rss\n"
        "blocks = [bytearray(512) for _ in range(200_000)]\n"
        "keep = blocks[-1]\n"
        "del blocks\n"
        "before = rss()\n"
        "assert release_freed_heap() is True\n"
        "print(before - rss())\n")
    released = int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                  text=True).stdout)
    assert released > 20 * 2**20  # most of the ~100 MB freed, far more than any noise
