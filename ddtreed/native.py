"""The optional C part of ddtreed (`ddtreed._fastscan`, built by setup.py where a C compiler is
found): a log block's decode lines read in one pass for the serving watch, and the assembler's
needle finders (ddtreed/tracebacks/scan.py). Without it, or with DDTREED_NO_NATIVE=1 in the
environment, `re` reads the decode lines (ddtreed/health/serving.py) and RE2 finds the needles:
the same results (tests/test_fastscan.py, tests/test_fastscan_needles.py), more CPU per line.
`ddtreed --version` names the reader in use."""

from __future__ import annotations

import os
from typing import Any


def load_fastscan() -> Any:
    """The `_fastscan` module, or None (not built, or DDTREED_NO_NATIVE set to anything but 0)."""
    if os.environ.get("DDTREED_NO_NATIVE", "") not in ("", "0"):
        return None
    try:
        from . import _fastscan  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fastscan


def decode_reader() -> str:
    """Which code reads a log block's decode lines here: "native" (C) or "python" (`re`)."""
    return "native" if load_fastscan() is not None else "python"
