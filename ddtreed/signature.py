"""A crash's fingerprint: the same failure on any rank, install path or batch shape hashes alike.

Each normalisation step leaves a hint in words, so `ddtreed diagnose --explain` can show why two
crashes share (or do not share) a signature.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .records import Crash, Signature

IN_APP_PREFIXES = ("sglang/",)  # frames of the supervised package; torch & co. are not ours
PACKAGE_MARKERS = ("/site-packages/", "/dist-packages/", "/python/")
FINGERPRINT_CHARS = 16

_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w)")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+@-]+){2,}")


def signature_of(crash: Crash) -> Signature:
    """Fingerprint from exception type, normalised message and in-app frames, with hints."""
    hints: list[str] = []
    first_line, *rest = (crash.message or "").split("\n")
    if rest:
        hints.append(f"only the first line of the {len(rest) + 1}-line message kept")
    message = _shorten_paths(first_line, hints)
    message = _replace_hex(message, hints)
    message, numbers = _replace_numbers(message, hints)
    frames = _frames(crash, hints)
    params: dict[str, Any] = {f"n{i}": value for i, value in enumerate(numbers)}
    if crash.wrapper:
        params.update(wrapper=crash.wrapper, inner_exception=crash.inner_exception,
                      inner_message=crash.inner_message)
        inner = f"{crash.inner_exception}: " if crash.inner_exception else ""
        hints.append(f"message wrapped by {crash.wrapper!r}: inner {inner}"
                     f"{crash.inner_message!r} kept as inner_exception/inner_message")
    if crash.exit_code is not None:
        params["exit_code"] = crash.exit_code
    if crash.rank:
        hints.append(f"rank {crash.rank} left out of the fingerprint")
    material = "\n".join([crash.kind, crash.exception or "", message, *frames])
    fingerprint = hashlib.sha256(material.encode()).hexdigest()[:FINGERPRINT_CHARS]
    return Signature(fingerprint=fingerprint, exception=crash.exception, normalized_message=message,
                     frames=frames, params=params, hints=tuple(hints))


def _shorten_paths(text: str, hints: list[str]) -> str:
    shortened = _PATH.sub(lambda m: _package_relative(m.group(0)), text)
    if shortened != text:
        hints.append("paths in the message shortened to package-relative")
    return shortened


def _package_relative(path: str) -> str:
    for marker in PACKAGE_MARKERS:
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return path


def _replace_hex(text: str, hints: list[str]) -> str:
    replaced = _HEX.sub("<hex>", text)
    if replaced != text:
        hints.append("hex values replaced by <hex>")
    return replaced


def _replace_numbers(text: str, hints: list[str]) -> tuple[str, list[int | float]]:
    numbers: list[int | float] = []

    def keep(match: re.Match) -> str:
        token = match.group(0)
        numbers.append(float(token) if "." in token else int(token))
        return "<n>"

    replaced = _NUMBER.sub(keep, text)
    if numbers:
        shown = ", ".join(str(n) for n in numbers[:12]) + (", …" if len(numbers) > 12 else "")
        hints.append(f"numbers {shown} replaced by <n> and kept as n0..n{len(numbers) - 1}")
    return replaced, numbers


def _frames(crash: Crash, hints: list[str]) -> tuple[str, ...]:
    """In-app frames as `module:function`; all frames when none is in-app."""
    if not crash.frames:
        return ()
    shortened = sum(1 for frame in crash.frames if frame.module != frame.file)
    if shortened:
        hints.append(f"{shortened} frame path(s) shortened to package-relative")
    if any(frame.line is not None for frame in crash.frames):
        hints.append("line numbers dropped from frames")
    in_app = [f for f in crash.frames if f.module.startswith(IN_APP_PREFIXES)]
    dropped = [f for f in crash.frames if not f.module.startswith(IN_APP_PREFIXES)]
    if not in_app:
        hints.append(f"no in-app ({', '.join(IN_APP_PREFIXES)}) frame: all {len(dropped)} frames kept")
        return tuple(f"{f.module}:{f.function}" for f in crash.frames)
    if dropped:
        packages = sorted({f.module.split("/", 1)[0] for f in dropped})
        hints.append(f"{len(dropped)} frame(s) dropped as not in-app ({', '.join(packages)})")
    return tuple(f"{f.module}:{f.function}" for f in in_app)
