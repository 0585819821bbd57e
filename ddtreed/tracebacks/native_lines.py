"""Evidence a crash prints outside a Python traceback, which the assembler keeps with the crash:

- communication failure lines (NCCL's own `… NCCL WARN …` lines, torch's c10d / ProcessGroupNCCL /
  gloo / TCPStore glog lines, NVSHMEM's and DeepEP's errors) printed before a process dies without
  a word of its own: they become that death's context;
- the continuation lines Ascend's torch_npu (PTA) and CANN print under an `NPU function error`
  exception line (`[ERROR] … PTA call acl api failed.`, `EZ9999: Inner Error!`, CANN's own
  `TraceBack (most recent call last):` block): they belong to that exception's message;
- a crash announced on one prefixed line with its error inline (`Scheduler hit an exception:
  torch.distributed.DistBackendError: …`), no traceback after it.

Only lines shaped like a failure count: a healthy run prints NCCL warnings too (torch's
`destroy_process_group() was not called` at every exit, plugin probing at start-up).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

# The scanner's idle needles include these, so an untagged line holding one reaches `CommLines.note`;
# the other transports' failure lines hold a context word (`failed`, `error`) the scanner looks for
# anyway. Few needles with common first letters: each one costs every untagged line a little.
COMM_NEEDLES = ("NCCL WARN", "[c10d]", "ProcessGroup", "DeepEP")
# The transport that printed it: NCCL's `host:pid:tid [dev] file.cc:NN NCCL WARN …`, a glog line of
# torch's distributed C++ (`[E1201 10:00:00.000 ProcessGroupNCCL.cpp:1595] …`, the older
# `[E ProcessGroupGloo.cpp:138] …`), c10d's `[c10d]` tag, gloo's transport paths, NVSHMEM, DeepEP.
_TRANSPORT = re.compile(
    r"NCCL WARN|\[c10d\]"
    r"|^\[[EFW]\d{0,4}[^\]]{0,80}?(?:ProcessGroup\w*|TCPStore\w*|socket|c10d\w*|NCCLUtils)\.[ch]pp:\d+\]"
    r"|Gloo \w+ failed|gloo/transport|\bnvshmem\w*|NVSHMEM|DeepEP\b[^\n]{0,80}\b(?:error|timeout)|NCCL error")
# It says something failed (a warning about a setting does not).
_FAILED = re.compile(
    r"(?i:fail|error|timed out|timeout|abort|closed|reset by peer|refused|unreachable|mismatch|exited|revoked"
    r"|broken pipe|unhandled|no socket interface|terminat|not (?:found|available|connected)|invalid)"
    r"|status=[1-9]")
# Printed by healthy runs (or about a fallback that works): never evidence of a failure.
_BENIGN = re.compile(
    r"destroy_process_group\(\) was not called|Cannot initialize CollNet|Could not find real path|NET/Plugin"
    r"|[Uu]nsetting|will be ignored|[Ff]alling back|using (?:point-to-point|socket)|is deprecated"
    r"|Failed to open libibverbs|NCCL_\w+ set by environment|[Rr]etrying|will retry|willRetry=true"
    # c10d's connect loop warns on every attempt while the store's server is not up yet
    r"|^\[W[^\]]*socket\.cpp:\d+\] \[c10d\] The client socket has failed to connect")
# A line this many lines before a death (same source) still explains it; from another source (the
# other stream of the same service) within this many seconds.
COMM_WINDOW_LINES = 200
COMM_WINDOW_S = 30.0
COMM_KEPT = 3


def comm_failure(line: str) -> str | None:
    """The line (cut to 500 characters) when it reports a failed connection, collective or store."""
    if _TRANSPORT.search(line) is None or _BENIGN.search(line) or _FAILED.search(line) is None:
        return None
    return line.strip()[:500]


@dataclass
class CommLines:
    """The last communication failure lines seen, over every source of one assembler."""

    lines: deque = field(default_factory=lambda: deque(maxlen=COMM_KEPT))  # (source, number, at, text)

    def note(self, source: str, number: int, at: float, line: str) -> str | None:
        """Keep the line if it reports a failure; returns what was kept (`comm_failure`)."""
        text = comm_failure(line)
        if text is not None:
            self.lines.append((source, number, at, text))
        return text

    def add(self, source: str, number: int, at: float, text: str) -> None:
        """Keep `text`, which `note` kept before for a line of the same text."""
        self.lines.append((source, number, at, text))

    def clear(self) -> None:
        """A start-up milestone after them: the transport came up after all."""
        self.lines.clear()

    def before(self, source: str, number: int, at: float) -> tuple[str, ...]:
        """The lines that may explain a death printed at `number` of `source` (at time `at`)."""
        return tuple(text for seen_source, seen_number, seen_at, text in self.lines
                     if (seen_source == source and 0 <= number - seen_number <= COMM_WINDOW_LINES)
                     or (seen_source != source and 0 <= at - seen_at <= COMM_WINDOW_S))


# Ascend: the lines torch_npu and CANN print under the exception line, part of its message.
_CANN = re.compile(r"(?:E[A-Z]\d{4}: |\[(?:ERROR|WARNING)\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d[^\n]{0,80}\(PID:"
                   r"|TraceBack \(most recent call last\):)")


# The source location C++ error macros put on the line after the error (sgl-kernel's CHECK_CUDA_SUCCESS:
# `invalid argument` then `/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350`).
_LOCATION = re.compile(r"/?(?:[\w.+-]+/)*[\w.+-]+\.(?:cuh|cu|cpp|cc|cxx|c|hpp|h):\d+$")


def cann_continuation(stripped: str, after_cann: bool, indented: bool) -> bool:
    """Does this line continue a bare exception line's message: an NPU (CANN) line (`after_cann`: one
    came before, so its indented TraceBack lines follow), or the C++ source location under the error?"""
    return (_CANN.match(stripped) is not None or (after_cann and indented and bool(stripped))
            or _LOCATION.match(stripped) is not None)


# `… hit an exception: torch.distributed.DistBackendError: NCCL error …` on one prefixed line.
ANNOUNCED_NEEDLE = "hit an exception: "
_ANNOUNCED = re.compile(r"hit an exception: (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): "
                        r"(?P<message>\S.*)$")


def announced_inline(body: str) -> tuple[str, str] | None:
    """(exception, message) of a prefixed line that announces a crash with its error inline."""
    if ANNOUNCED_NEEDLE not in body:
        return None
    found = _ANNOUNCED.search(body)
    return (found.group("type"), found.group("message").strip()) if found else None
