"""Where the shipped rule, remediation and example files live (source checkout or install)."""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent


def shipped(kind: str) -> Path:
    """`rules`, `remediations` or `examples`: the checkout's folder, else the installed copy."""
    candidate = _CHECKOUT / kind
    if candidate.is_dir():
        return candidate
    return Path(sys.prefix) / "share" / "ddtreed" / kind
