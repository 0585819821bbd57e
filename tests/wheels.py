"""Real sglang wheels for tests: download once (pip), extract a few files as a site-packages.

Cache: $DDTREED_WHEEL_CACHE, default ~/.cache/ddtreed-test-wheels (outside the repo). A failed
download raises: wheel tests must fail, never skip, when PyPI is unreachable.
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
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
             f"sglang=={version}", "--dest", str(cache)],
            capture_output=True, text=True, timeout=900)
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
        if done.returncode != 0 or not found:
            raise WheelUnavailable(f"pip download sglang=={version} failed ({done.returncode}): "
                                   f"{done.stderr.strip()[-500:]}")
        return found[0]


def site_packages(version: str) -> Path:
    """A pristine extracted site-packages (cached, read it only) holding MEMBERS and RECORD."""
    target = cache_dir() / "extracted-v2" / version
    if (target / ".complete").exists():
        return target
    partial = target.with_name(version + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel(version)) as archive:
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
