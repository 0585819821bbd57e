"""Real sglang wheels for tests: download once (pip), extract a few files as a site-packages.

Cache: $DDTREED_WHEEL_CACHE, default ~/.cache/ddtreed-test-wheels (outside the repo). Offline
with an empty cache, the wheel tests skip and say why in the summary; CI sets
DDTREED_REQUIRE_WHEELS=1, which turns that skip into a failure (CI must test the real wheels).
One failed download ends the attempts for the session, so an offline run does not wait on pip
once per version.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

VERSIONS = ("0.5.9", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.20", "0.5.23")
# The files the width layouts and flag checks read (absent ones are skipped per version).
MEMBERS = (
    "sglang/srt/model_executor/cuda_graph_runner.py",
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/speculative/spec_info.py",
    "sglang/srt/speculative/spec_utils.py",
    "sglang/srt/server_args.py",
)
MEMBER_FOLDERS = ("sglang/srt/arg_groups/fields/",)  # 0.5.20+: flags declared as dataclass fields


class WheelUnavailable(RuntimeError):
    """pip could not download the wheel."""


_FAILED: list[str] = []  # the first download failure of this session, if any


def unavailable(error: WheelUnavailable):
    """Skip the calling test, or fail it under DDTREED_REQUIRE_WHEELS=1 (CI)."""
    import pytest

    reason = (f"real sglang wheels not cached in {cache_dir()} and not downloadable ({error}); "
              "run once online, or point DDTREED_WHEEL_CACHE at a cache")
    if os.environ.get("DDTREED_REQUIRE_WHEELS") == "1":
        pytest.fail(reason + "; DDTREED_REQUIRE_WHEELS=1 requires them")
    pytest.skip(reason)


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "ddtreed-test-wheels"
    return Path(os.environ.get("DDTREED_WHEEL_CACHE", default))


def wheel(version: str) -> Path:
    """The cached wheel file for sglang==version, downloading it with pip when missing."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a+") as lock:  # xdist workers or parallel CI jobs share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
        if found:
            return found[0]
        if _FAILED:
            raise WheelUnavailable(f"not trying sglang=={version}: {_FAILED[0]}")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                 "--retries", "1", "--timeout", "20", f"sglang=={version}", "--dest", str(cache)],
                capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            _FAILED.append(f"pip download sglang=={version} timed out")
            raise WheelUnavailable(_FAILED[0]) from None
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
        if done.returncode != 0 or not found:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1][-300:]
            _FAILED.append(f"pip download sglang=={version} failed ({done.returncode}): {last}")
            raise WheelUnavailable(_FAILED[0])
        return found[0]


def site_packages(version: str) -> Path:
    """A pristine extracted site-packages (cached, read it only) holding MEMBERS and RECORD."""
    target = cache_dir() / "extracted-v2" / version
    if (target / ".complete").exists():
        return target
    partial = target.with_name(version + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        downloaded = wheel(version)
    except WheelUnavailable as error:
        unavailable(error)
    with zipfile.ZipFile(downloaded) as archive:
        names = set(archive.namelist())
        wanted = [name for name in MEMBERS if name in names]
        wanted += [name for name in names if name.startswith(MEMBER_FOLDERS) and name.endswith(".py")]
        wanted += [name for name in names if name.endswith(".dist-info/RECORD")]
        for name in wanted:
            archive.extract(name, partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").touch()
    return target


def fresh_copy(version: str, into: Path) -> Path:
    """A writable copy of the extracted site-packages under `into` (each test patches its own)."""
    destination = into / f"site-{version}"
    shutil.copytree(site_packages(version), destination, ignore=shutil.ignore_patterns(".complete"))
    return destination
