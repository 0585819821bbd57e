"""Find the sglang installed for the service's interpreter, without importing it (cached)."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import structlog

from ..service.host import write_atomic

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_S = 30.0  # a cold interpreter on a busy node; importing sglang itself is never done
PROBE_CACHE = "installation-probe.json"

# Runs in the service's interpreter. Never `import sglang`: that pulls torch and takes seconds.
_PROBE_SCRIPT = """
import importlib.metadata, importlib.util, json, os, sys
version = dist_info = None
try:
    dist = importlib.metadata.distribution("sglang")
    version = dist.version
    dist_info = str(getattr(dist, "_path", "")) or None
except importlib.metadata.PackageNotFoundError:
    pass
spec = importlib.util.find_spec("sglang")
package = None
if spec is not None:
    package = os.path.dirname(spec.origin) if spec.origin else list(spec.submodule_search_locations)[0]
print(json.dumps({"version": version, "dist_info": dist_info,
                  "site_packages": os.path.dirname(package) if package else None,
                  "python": sys.executable}))
"""


def probe_installation(python: str, host, cache_dir: str | None = None, *,
                       env: Mapping[str, str] | None = None,
                       timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str | None, str | None]:
    """(sglang version, directory holding `sglang/`) for an interpreter; (None, None) if absent.

    Cached in `cache_dir` by interpreter path + mtime; a cached answer whose package is gone is re-probed.
    """
    pythonpath = (env or {}).get("PYTHONPATH", "")
    key = f"{getattr(host, 'name', 'host')}:{python}:{_mtime(host, python)}:{pythonpath}"
    cached = _cache_get(cache_dir, key)
    if cached is not None and _still_installed(host, cached):
        return cached.get("version"), cached.get("site_packages")
    argv = ["env", f"PYTHONPATH={pythonpath}"] if pythonpath else []
    result = host.run(argv + [python, "-c", _PROBE_SCRIPT], timeout=timeout_s)
    if result.returncode != 0:
        log.warning("installation_probe_failed", python=python, returncode=result.returncode,
                    stderr=result.stderr.strip()[-400:])
        return None, None
    try:
        found = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        log.warning("installation_probe_unreadable", python=python, stdout=result.stdout[-400:])
        return None, None
    if found.get("site_packages") and not found.get("version"):
        # A source checkout on PYTHONPATH has no dist-info; its version.py still says.
        found["version"] = _version_py(host, found["site_packages"])
    _cache_put(cache_dir, key, found)
    log.info("installation_probed", python=python, version=found.get("version"),
             site_packages=found.get("site_packages"))
    return found.get("version"), found.get("site_packages")


def _mtime(host, path: str) -> str:
    """The interpreter's mtime: a rebuilt venv is a different installation."""
    if getattr(host, "local", False):
        try:
            return str(os.stat(path).st_mtime_ns)
        except OSError:
            return "missing"
    result = host.run(["stat", "-L", "-c", "%Y", path], timeout=10.0)
    return result.stdout.strip() if result.returncode == 0 else "missing"


def _still_installed(host, cached: Mapping[str, Any]) -> bool:
    """pip replaces the dist-info directory on upgrade, so its presence validates the version."""
    marker = cached.get("dist_info") or (
        os.path.join(cached["site_packages"], "sglang") if cached.get("site_packages") else None)
    return marker is None or host.exists(marker)


def _cache_get(cache_dir: str | None, key: str) -> Mapping[str, Any] | None:
    if not cache_dir:
        return None
    try:
        with open(os.path.join(cache_dir, PROBE_CACHE), encoding="utf-8") as handle:
            entry = json.load(handle).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def _cache_put(cache_dir: str | None, key: str, found: Mapping[str, Any]) -> None:
    if not cache_dir:
        return
    path = os.path.join(cache_dir, PROBE_CACHE)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        try:
            with open(path, encoding="utf-8") as handle:
                entries = json.load(handle)
        except (OSError, ValueError):
            entries = {}
        if not isinstance(entries, dict):
            entries = {}
        entries[key] = dict(found)
        write_atomic(path, json.dumps(entries, indent=1).encode("utf-8"), mode=0o600)
    except OSError as error:
        # A read-only state dir costs one interpreter start per launch, nothing more.
        log.warning("installation_cache_unwritable", path=path, error=str(error))


def version_in_site_packages(host, site_packages: str) -> str | None:
    """The version in `<dir>/*.dist-info/METADATA` (sglang's first), else `sglang/version.py`."""
    names = _list_dir(host, site_packages)
    dist_infos = sorted(name for name in names if name.endswith(".dist-info"))
    preferred = [name for name in dist_infos if name.lower().startswith("sglang-")] or dist_infos
    for name in preferred:
        version = _metadata_version(host, os.path.join(site_packages, name, "METADATA"))
        if version:
            return version
    version = _version_py(host, site_packages)
    if version is None and preferred:
        # `name-1.2.3.dist-info`: the wheel spec puts the version in the directory name too.
        stem = preferred[0][: -len(".dist-info")]
        version = stem.rsplit("-", 1)[1] if "-" in stem else None
    return version


def _list_dir(host, path: str) -> list[str]:
    if getattr(host, "local", False):
        try:
            return os.listdir(path)
        except OSError:
            return []
    result = host.run(["ls", "-1", path], timeout=10.0)
    return result.stdout.split() if result.returncode == 0 else []


def _metadata_version(host, path: str) -> str | None:
    try:
        text = host.read_bytes(path).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip() or None
        if not line.strip():
            break  # headers end at the first blank line
    return None


def _version_py(host, site_packages: str) -> str | None:
    try:
        text = host.read_bytes(os.path.join(site_packages, "sglang", "version.py")).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "__version__":
            return value.strip().strip("'\"") or None
    return None
