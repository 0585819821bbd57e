"""The fault harness' tests import the shared helpers of tests/ and tests/programs/."""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for folder in (_TESTS, _TESTS / "programs", Path(__file__).resolve().parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
