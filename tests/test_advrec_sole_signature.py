"""Adversary's pin of `incident_path.sole_signature` (71e2591): where it names a signature, the
crash's row is committed under it before the rules run, and its fingerprint decides whether the
crash is a recurrence of an open incident. That is sound only if the rules' diagnosis of the same
crashes always carries the same fingerprint. Checked here on every crash group of every corpus
report (the crash groups the daemon would assemble, echoes dropped as handle_crash drops them),
and on groups made to differ where a fingerprint does not look (numbers, exit codes, ranks,
wrappers' inner numbers, chained causes), with the shipped rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtreed.health.serving import without_echoes
from ddtreed.loop.incident_path import sole_signature, synthetic_crash
from ddtreed.paths import shipped
from ddtreed.records import Crash, ExitStatus, Frame
from ddtreed.rules import load_rules
from ddtreed.signature import signature_of
from ddtreed.tracebacks import assemble_lines

RULES = load_rules([shipped("rules")])
CORPUS = Path(__file__).parent / "corpus"


def _reports() -> list[tuple[str, str]]:
    found = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                found.append((f"{path.stem}:{entry['id']}", entry.get("log") or entry.get("text") or ""))
    return found


def _judged(group: tuple[Crash, ...]) -> tuple[Crash, ...]:
    return without_echoes(group) or (synthetic_crash(ExitStatus(code=1, signal=None), 0.0),)


def test_every_corpus_group_with_one_signature_is_diagnosed_under_that_signature():
    checked = 0
    for name, text in _reports():
        for group in assemble_lines(text.splitlines(), source=name):
            crashes = _judged(group)
            sole = sole_signature(crashes)
            if sole is None:
                continue
            checked += 1
            assert RULES.diagnose(crashes).signature.fingerprint == sole.fingerprint, name
    assert checked >= 400  # most reports: one error, on one or more ranks (446 groups in session 15)


def _rank(rank: str, message: str, **fields) -> Crash:
    frames = (Frame(file="/venv/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py",
                    line=812, function="replay_prepare"),)
    return Crash(kind=fields.pop("kind", "traceback"), exception=fields.pop("exception", "RuntimeError"),
                 message=message, frames=frames, rank=rank, **fields)


GROUPS = {
    "numbers differ per rank": tuple(_rank(f"TP{i}", f"The size of tensor a ({8 + i}) must match the size of "
                                     f"tensor b (33) at non-singleton dimension 0") for i in range(8)),
    "exit codes differ": tuple(Crash(kind="child-death", exception=None, message="a child process died",
                                     exit_code=code, rank=f"TP{i}") for i, code in enumerate((-9, 1, 137))),
    "wrapped, inner numbers differ": tuple(
        _rank(f"TP{i}", f"Capture cuda graph failed: CUDA out of memory. Tried to allocate {i + 1}.00 GiB",
              wrapper="Capture cuda graph failed", inner_exception="torch.OutOfMemoryError",
              inner_message=f"CUDA out of memory. Tried to allocate {i + 1}.00 GiB") for i in range(2)),
    "chained causes differ": (
        _rank("TP0", "CUDA error: an illegal memory access was encountered",
              chained=(_rank("TP0", "NCCL watchdog timeout", exception="torch.distributed.DistBackendError"),)),
        _rank("TP1", "CUDA error: an illegal memory access was encountered",
              chained=(_rank("TP1", "'NoneType' object is not subscriptable", exception="TypeError"),))),
    "a lone canary failure": (Crash(kind="canary", exception=None, message="greedy output differs from golden 3"),),
    "a service gone without a traceback": (synthetic_crash(ExitStatus(code=None, signal=9), 0.0),),
}


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_a_group_that_differs_only_where_a_fingerprint_does_not_look(name):
    crashes = _judged(GROUPS[name])
    sole = sole_signature(crashes)
    assert sole is not None and sole.fingerprint == signature_of(crashes[0]).fingerprint
    assert RULES.diagnose(crashes).signature.fingerprint == sole.fingerprint
