"""Install the demo engine into a site-packages directory, with a real dist-info RECORD."""

from __future__ import annotations

import base64
import hashlib
import shutil
from pathlib import Path

ENGINE_NAME = "ddtreed_demo_engine"
ENGINE_VERSION = "0.1.0"
TEMPLATE = Path(__file__).parent / "engine" / ENGINE_NAME


def install_engine(site_packages: Path) -> Path:
    """A fresh, unpatched copy of the engine package; returns the package directory."""
    site_packages.mkdir(parents=True, exist_ok=True)
    package = site_packages / ENGINE_NAME
    shutil.rmtree(package, ignore_errors=True)  # stale bytecode of a patched copy included
    package.mkdir()
    for source in sorted(TEMPLATE.glob("*.py")):
        shutil.copyfile(source, package / source.name)
    dist_info = site_packages / f"{ENGINE_NAME}-{ENGINE_VERSION}.dist-info"
    shutil.rmtree(dist_info, ignore_errors=True)
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {ENGINE_NAME}\nVersion: {ENGINE_VERSION}\n"
        "Summary: The ddtreed demo service's model runner (patched by ddtreed remediations)\n")
    (dist_info / "INSTALLER").write_text("ddtreed-demo\n")
    (dist_info / "top_level.txt").write_text(f"{ENGINE_NAME}\n")
    write_record(site_packages, [package, dist_info], dist_info / "RECORD")
    return package


def write_record(site_packages: Path, roots: list[Path], record: Path) -> None:
    """PEP 376/627 RECORD: `path,sha256=<urlsafe base64, no padding>,size`; RECORD itself unhashed."""
    rows = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p != record):
            data = path.read_bytes()
            rows.append(f"{path.relative_to(site_packages).as_posix()},{record_hash(data)},{len(data)}")
    rows.append(f"{record.relative_to(site_packages).as_posix()},,")
    record.write_text("\n".join(rows) + "\n")


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"
