"""Reading an installed package through a Host: its dist-info, version, RECORD hashes, and
whether a relative path stays inside the package."""

from __future__ import annotations

import base64
import hashlib
import posixpath
import re

from ..service.host import Host


class SiteError(ValueError):
    """The site-packages directory or a file in it cannot be trusted or read."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def listdir(host: Host, directory: str) -> list[str]:
    """Entries of a directory on the host (`listdir` when the host has it, else `ls -1A`)."""
    native = getattr(host, "listdir", None)
    if native is not None:
        return sorted(native(directory))
    result = host.run(["ls", "-1A", directory], timeout=30.0)
    if result.returncode != 0:
        raise SiteError(f"{directory}: cannot list: {result.stderr.strip() or 'ls failed'}")
    return sorted(line for line in result.stdout.splitlines() if line)


def dist_info(host: Host, site_packages: str, distribution: str) -> tuple[str, str] | None:
    """(dist-info directory, version) of an installed distribution, or None."""
    wanted = _normalise(distribution)
    for entry in listdir(host, site_packages):
        match = re.fullmatch(r"(.+?)-([^-]+)\.dist-info", entry)
        if match and _normalise(match.group(1)) == wanted:
            return posixpath.join(site_packages, entry), match.group(2)
    return None


def record_hash(data: bytes) -> str:
    """The RECORD form of a hash: sha256, urlsafe base64 without padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def recorded_hash(host: Host, dist_dir: str, relative: str) -> str | None:
    """The hash RECORD lists for `relative` (None when RECORD does not list it)."""
    record = posixpath.join(dist_dir, "RECORD")
    try:
        text = host.read_bytes(record).decode("utf-8", errors="replace")
    except OSError as error:
        raise SiteError(f"{record}: cannot read: {error.strerror or error}") from None
    for line in text.splitlines():
        # RECORD is CSV; package paths never contain commas, so a split is exact here.
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0] == relative:
            return parts[1] or None
    return None


def resolve_inside(host: Host, site_packages: str, relative: str) -> str:
    """The absolute target path, refusing anything that leaves its top-level package dir."""
    if relative.startswith("/") or ".." in relative.split("/"):
        raise SiteError(f"{relative}: target must be a relative path without '..'")
    package_root = host.realpath(posixpath.join(site_packages, relative.split("/")[0]))
    target = posixpath.join(site_packages, relative)
    resolved = host.realpath(target)
    if not resolved.startswith(package_root.rstrip("/") + "/"):
        raise SiteError(f"{target}: resolves to {resolved}, outside the package {package_root}")
    return target
