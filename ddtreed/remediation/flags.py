"""Which SGLang launch flags exist in which version: the one table flag remediations and
preflight both consult, so a remediation never writes a flag the installed SGLang rejects."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Spelling:
    """One name of a flag and the versions (inclusive) that accept it; None = unbounded."""

    name: str
    since: str | None = None
    until: str | None = None

    def accepted_by(self, version: str | None) -> bool | None:
        """True/False for a known version; None when the version is unknown and bounds exist."""
        if self.since is None and self.until is None:
            return True
        if version is None:
            return None
        parsed = parse_version(version)
        if self.since is not None and parsed < parse_version(self.since):
            return False
        return not (self.until is not None and parsed > parse_version(self.until))


# Logical flag -> its spellings, preferred first. Checked against the real wheels (tests/test_wheels*).
# `--cuda-graph-max-bs`/`--cuda-graph-bs` are gone in 0.5.20 (argparse exits 2 on them).
FLAGS: dict[str, tuple[Spelling, ...]] = {
    "cuda-graph-max-bs": (Spelling("--cuda-graph-max-bs", until="0.5.19"),
                          Spelling("--cuda-graph-max-bs-decode", since="0.5.14")),
    "cuda-graph-bs": (Spelling("--cuda-graph-bs", until="0.5.19"),
                      Spelling("--cuda-graph-bs-decode", since="0.5.14")),
    "disable-cuda-graph": (Spelling("--disable-cuda-graph"),),
    "mem-fraction-static": (Spelling("--mem-fraction-static"),),
    "max-running-requests": (Spelling("--max-running-requests"),),
    "disable-custom-all-reduce": (Spelling("--disable-custom-all-reduce"),),
    "speculative-algorithm": (Spelling("--speculative-algorithm"),),
    "speculative-num-draft-tokens": (Spelling("--speculative-num-draft-tokens"),),
    "speculative-dflash-block-size": (Spelling("--speculative-dflash-block-size", since="0.5.11"),),
    # DDTree is in no release: these exist exactly in builds that accept DDTREE (PR #29907, forks).
    "speculative-ddtree-budget": (Spelling("--speculative-ddtree-budget"),),
}

# Speculative algorithms and the first release that has them (DDTREE: no release; builds only).
ALGORITHMS_SINCE = {"EAGLE": "0.4.0", "EAGLE3": "0.4.6", "NGRAM": "0.5.0", "STANDALONE": "0.5.0",
                    "DFLASH": "0.5.11"}


class FlagUnavailable(ValueError):
    """No spelling of a logical flag is known to be accepted by this SGLang."""


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.13.post1' -> (0, 5, 13); leading numeric parts only."""
    parts = []
    for piece in text.strip().lstrip("v").split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
        if match.group() != piece:
            break
    return tuple(parts)


def spellings(logical: str) -> tuple[Spelling, ...]:
    try:
        return FLAGS[logical]
    except KeyError:
        raise FlagUnavailable(f"unknown logical flag {logical!r} (known: {', '.join(FLAGS)})") from None


def all_names(logical: str) -> tuple[str, ...]:
    return tuple(spelling.name for spelling in spellings(logical))


def choose(logical: str, version: str | None, present: tuple[str, ...] = ()) -> str:
    """The spelling to write for `version`, preferring one already in the argv (`present`)."""
    options = spellings(logical)
    for spelling in options:
        if spelling.name in present and spelling.accepted_by(version) is not False:
            return spelling.name
    for spelling in options:
        if spelling.accepted_by(version) is True:
            return spelling.name
    names = " / ".join(spelling.name for spelling in options)
    if version is None:
        raise FlagUnavailable(f"sglang version unknown: cannot choose between {names}")
    raise FlagUnavailable(f"sglang {version} accepts none of {names}")


def rejected(argv: tuple[str, ...] | list[str], version: str | None) -> list[str]:
    """Flags in `argv` that this table knows the given version rejects, each as one sentence."""
    problems = []
    for token in argv:
        name = token.split("=", 1)[0]
        for options in FLAGS.values():
            for spelling in options:
                if spelling.name == name and spelling.accepted_by(version) is False:
                    bounds = f"{spelling.since or 'any'}..{spelling.until or 'latest'}"
                    problems.append(f"{name} is not accepted by sglang {version} (exists {bounds})")
    return problems


def algorithm_available(algorithm: str, version: str | None) -> bool | None:
    """Whether a released sglang of `version` knows the speculative algorithm (None: can't tell)."""
    since = ALGORITHMS_SINCE.get(algorithm.upper())
    if since is None or version is None:
        return None
    return parse_version(version) >= parse_version(since)
