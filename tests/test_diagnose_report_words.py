"""Three shipped rules read their failure in a report's own words too, not only in the library's line.

- missing-python-module: Python's `No module named x` written in lowercase inside a sentence
  (`… will cast no module named specforge.modeling… error`);
- illegal-memory-access: ROCm's `Memory access fault by GPU node-N …` told as "a memory access fault";
- scheduler-watchdog-timeout: the watchdog's kill told in words ("the scheduler watchdog kills the
  process at 300s") rather than its `Scheduler watchdog timeout (self.watchdog_timeout=300 …)` line.

Each wording through `ddtreed diagnose`'s own path, with the shipped rules; the near misses keep
their categories."""

import pytest

from phrasing_helpers import first_category, with_and_without

RULES, _ = with_and_without("source-families-8.toml")

WORDS = [
    ("missing-dependency", "Running the trainer fails: no module named 'specforge.modeling.target' when it imports the wrapper."),
    ("missing-dependency", "ModuleNotFoundError: No module named 'sgl_kernel'"),
    ("illegal-memory-access", "With batch size 64 the server dies with a memory access fault on the MI300X."),
    ("illegal-memory-access", "Memory access fault by GPU node-2 (Agent handle: 0x5a1c3e0) on address 0x7f0c2a000000. Reason: Unknown."),
    ("scheduler-watchdog-timeout", "The server hangs with both ranks at 100% until the scheduler watchdog kills the process after 300 s."),
    ("scheduler-watchdog-timeout", "After ten minutes the watchdog terminated the server."),
]

NEAR_MISSES = [
    # a module that exists but lacks a name stays the version-mismatch rule's (same category)
    ("missing-dependency", "ImportError: cannot import name 'flash_attn_varlen_func' from 'flash_attn' (/usr/lib/python3/flash_attn/__init__.py)"),
    # an access fault a host process reports (a Python segfault) is a fatal signal, not the GPU's
    ("fatal-signal", "Fatal Python error: Segmentation fault"),
]


@pytest.mark.parametrize("expected,text", WORDS + NEAR_MISSES)
def test_the_report_words_get_their_category(expected, text):
    got, diagnosis = first_category(RULES, text)
    assert got == expected, diagnosis
