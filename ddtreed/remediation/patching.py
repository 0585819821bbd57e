"""Find which layout of a patch remediation fits an installed package, and what it would write.

Trust comes from the package itself: the file must hash to its `.dist-info/RECORD` entry (or be
exactly ddtreed's own patch of that file), the anchor must appear exactly once, and the result
must compile. Anything else is refused with the reason; nothing is written here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..service.host import Host
from .catalog import Layout, Remediation
from .sitepackages import SiteError, dist_info, record_hash, recorded_hash, resolve_inside

APPLICABLE, APPLIED, REFUSED = "applicable", "applied", "refused"


@dataclass(frozen=True)
class PatchCheck:
    state: str  # applicable | applied (already, by ddtreed) | refused
    reason: str
    layout: Layout | None = None
    version: str | None = None
    path: str | None = None  # absolute on the host
    before: bytes | None = None  # the pristine (RECORD) bytes
    after: bytes | None = None  # the patched bytes
    current: bytes | None = None  # what is on disk now
    anchor_missing: bool = False  # another layout may still fit


def _compiles(data: bytes, path: str) -> str | None:
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def _check_layout(host: Host, site: str, layout: Layout, dist_dir: str, version: str) -> PatchCheck:
    """The verdict for one layout whose target file exists."""
    path = resolve_inside(host, site, layout.target)
    current = host.read_bytes(path)
    text = current.decode("utf-8", errors="surrogateescape")
    expected = recorded_hash(host, dist_dir, layout.target)
    found = dict(layout=layout, version=version, path=path, current=current)
    if expected is None:
        return PatchCheck(REFUSED, f"{layout.target} is not listed in {dist_dir}/RECORD", **found)
    fragment = layout.patched_fragment()
    if layout.marker in text:
        if text.count(fragment) != 1:
            return PatchCheck(REFUSED, f"{layout.target} carries the marker {layout.marker!r} but not "
                              "ddtreed's patch text: edited after patching", **found)
        pristine = text.replace(fragment, layout.anchor, 1).encode("utf-8", errors="surrogateescape")
        if record_hash(pristine) != expected:
            return PatchCheck(REFUSED, f"{layout.target} has ddtreed's patch on top of local changes "
                              "(unpatched text does not match RECORD)", **found)
        return PatchCheck(APPLIED, f"already applied (layout {layout.name})", before=pristine,
                          after=current, **found)
    count = text.count(layout.anchor)
    if count != 1:
        what = "not found" if count == 0 else f"found {count} times (must be exactly once)"
        return PatchCheck(REFUSED, f"{layout.target}: anchor of layout {layout.name} {what}",
                          anchor_missing=count == 0, **found)
    if record_hash(current) != expected:
        return PatchCheck(REFUSED, f"{layout.target} is locally modified: its hash differs from "
                          f"{dist_dir.rsplit('/', 1)[-1]}/RECORD", **found)
    after = text.replace(layout.anchor, fragment, 1).encode("utf-8", errors="surrogateescape")
    problem = _compiles(after, path)
    if problem:
        return PatchCheck(REFUSED, f"patched {layout.target} does not compile: {problem}", **found)
    return PatchCheck(APPLICABLE, f"layout {layout.name} for {layout.distribution} {version}",
                      before=current, after=after, **found)


def check_patch(host: Host, site: str, remediation: Remediation) -> PatchCheck:
    """The first layout that fits: layouts whose version range holds the installed version first,
    then any other layout whose anchor matches (a build between known ranges)."""
    installed: dict[str, tuple[str, str] | None] = {}
    in_range, others, misses = [], [], []
    for layout in remediation.layouts:
        if layout.distribution not in installed:
            installed[layout.distribution] = dist_info(host, site, layout.distribution)
        found = installed[layout.distribution]
        if found is None:
            continue
        (in_range if layout.versions.contains(found[1]) else others).append((layout, found))
    if not installed or not any(installed.values()):
        names = ", ".join(sorted({layout.distribution for layout in remediation.layouts}))
        return PatchCheck(REFUSED, f"{site}: none of {names} is installed there (no .dist-info)")
    for group in (in_range, others):
        for layout, (dist_dir, version) in group:
            try:
                if not host.exists(f"{site}/{layout.target}"):
                    misses.append(f"{layout.name}: {layout.target} absent")
                    continue
                verdict = _check_layout(host, site, layout, dist_dir, version)
            except SiteError as error:
                return PatchCheck(REFUSED, str(error), layout=layout, version=version)
            if not verdict.anchor_missing:
                return verdict
            misses.append(verdict.reason)
    versions = ", ".join(f"{name} {found[1]}" for name, found in installed.items() if found)
    return PatchCheck(REFUSED, f"no layout of {remediation.id} fits {versions}: " + "; ".join(misses))


def unified_diff(relative: str, before: bytes, after: bytes) -> str:
    old = before.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = after.decode("utf-8", errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, fromfile=f"a/{relative}", tofile=f"b/{relative}"))
