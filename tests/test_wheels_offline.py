"""Issue 17.4: offline with an empty wheel cache, the wheel tests skip with the reason; CI
(DDTREED_REQUIRE_WHEELS=1) fails instead. A real pytest run in a real subprocess, with pip
pointed at an index that refuses connections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run_wheel_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    offline = {**os.environ, "DDTREED_WHEEL_CACHE": str(tmp_path / "empty-cache"),
               "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "", "PIP_FIND_LINKS": "",
               "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PYTHONPATH": str(ROOT), **env}
    offline.pop("PIP_NO_INDEX")
    if "DDTREED_REQUIRE_WHEELS" not in env:  # CI sets it for its own run; the developer's case has none
        offline.pop("DDTREED_REQUIRE_WHEELS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q",
                           "tests/test_preflight_wheels.py", "-k", "0.5.9 or 0.5.12"],
                          cwd=ROOT, env=offline, capture_output=True, text=True, timeout=600)


def test_offline_wheel_tests_skip_with_the_reason(tmp_path):
    done = run_wheel_test(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.startswith("ss ") and done.stdout.count("SKIPPED [") == 2
    assert "SKIPPED" in done.stdout and "real sglang wheels not cached in" in done.stdout


def test_ci_requires_the_wheels(tmp_path):
    done = run_wheel_test(tmp_path, DDTREED_REQUIRE_WHEELS="1")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "DDTREED_REQUIRE_WHEELS=1 requires them" in done.stdout
