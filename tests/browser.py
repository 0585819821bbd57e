"""Debian's chromium, headless, for tests that must see a page the way a person would.

Installed by .ci/run (apt-get install chromium). Without it the tests skip with the reason in the
summary; DDTREED_REQUIRE_BROWSER=1 (CI sets it) turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--hide-scrollbars", "--no-first-run", "--disable-extensions",
         # Any fetch the page tried would go to a closed port: the page must need none.
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "needs Debian's chromium for the HTML tests (apt-get install chromium; .ci/run installs it)"
    if os.environ.get("DDTREED_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + "; DDTREED_REQUIRE_BROWSER=1 requires it")
    pytest.skip(reason)


def run(browser: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    profile = cwd / "chromium-profile"
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(cwd)})


def dump_dom(browser: str, page: Path) -> str:
    done = run(browser, "--dump-dom", page.resolve().as_uri(), cwd=page.parent)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    return done.stdout


def screenshot(browser: str, page: Path, size: str = "1400,1000") -> list[list[tuple[int, int, int]]]:
    """The page as rendered: rows of RGB pixels."""
    target = page.with_suffix(".png")
    done = run(browser, f"--window-size={size}", f"--screenshot={target}", page.resolve().as_uri(), cwd=page.parent)
    assert done.returncode == 0 and target.exists(), done.stderr[-2000:]
    return read_png(target.read_bytes())


def read_png(data: bytes) -> list[list[tuple[int, int, int]]]:
    """A minimal decoder for chromium's screenshots: 8-bit RGB or RGBA, not interlaced."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 4 if colour == 6 else 3
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return rows


def count_colour(pixels, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    return sum(1 for row in pixels for pixel in row
               if all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb)))
