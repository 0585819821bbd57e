"""The SGLang log line grammar: prefixes, rank tags, traceback pieces and crash announcements."""

from __future__ import annotations

import re

# Communication failure lines (NCCL WARN, c10d, gloo …) are looked for outside tracebacks too.
from .native_lines import ANNOUNCED_NEEDLE, COMM_NEEDLES as COMM_NEEDLES

# `[2026-07-28 10:00:00 DP0 TP3] body`, milliseconds with SGLANG_LOG_MS=1, optionally behind a
# Ray actor prefix `(SGLangHttpServer pid=41122) ` (the prefix repeats on every line).
_ACTOR = re.compile(r"\((?:[^()]*? )?pid=\d+[^()]*\) ")
_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"
    r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)

TRACEBACK_HEADER = "Traceback (most recent call last):"
CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# `line398` (no space) and faulthandler's `line 12 in f` (no comma) appear in real pastes.
FRAME = re.compile(r'\s*File "(?P<file>[^"]*)", line ?(?P<line>\d+)(?:,? in (?P<function>.*))?$')
PYSPY_FRAME = re.compile(r"\s+(?P<function>\S+) \((?P<file>[^()]+?):(?P<line>\d+)\)$")
# `ValueError: msg`, `zmq.error.ZMQError: msg`, `AssertionError` (inside a traceback any
# unindented line is the exception line; outside one only an Error/Exception name counts).
EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.]*(?:::\w+)*)(?::(?: (?P<message>.*))?)?$")
STANDALONE_EXCEPTION = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception)): (?P<message>.+)$"
)
WRAPPER = re.compile(r"(?P<wrapper>Capture (?:[\w ]+ )?cuda graph failed):\s*(?P<inner>.*)$",
                     re.IGNORECASE)
INNER_TYPE = re.compile(r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):\s*(?P<message>.*)$")
WATCHDOG_TIMEOUT = re.compile(r"[Ww]atchdog timeout \(")
CHILD_DEATHS = (
    re.compile(r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"),
    re.compile(r"Rank (?P<name>\d+) scheduler died during initialization \(exit code: (?P<code>-?\d+)\)"),
)
# A process the kernel killed (SIGKILL, usually the OOM killer) prints nothing itself: the shell's
# `Killed`, the kernel's `Out of memory: Killed process 4242 (python3) …` / `oom-kill:constraint=…`
# (dmesg, `journalctl -k`, pasted under the log) are the evidence. A child death of exit code -9.
KILL_LINE = re.compile(r"(?:Killed|(?:[\w./-]+: line \d+: +)?\d+ Killed(?: +\S.*)?|(?:\[[\d. ]+\] )?(?:.*\boom-kill:constraint=.*|"
                       r"(?:.*\b)?(?:[Oo]ut of memory|oom_reaper|Memory cgroup out of memory): Killed process \d+.*))$")
KILL_NEEDLES = ("Killed", "oom-kill:constraint=")
SHELL_KILLED = re.compile(r"(?P<pid>\d+) Killed +(?P<command>\S.*)$")  # bash's line for a killed job
KILLED_PROCESS = re.compile(r"Killed process (?P<pid>\d+) \((?P<name>[^)]{0,40})\)")


def kill_message(line: str) -> str:
    """A kill line's crash message: what was killed, in words of its own (the kernel's `Out of
    memory` is host memory, never the GPU's; the raw line stays in the crash's excerpt)."""
    named = KILLED_PROCESS.search(line)
    where = f": process {named.group('pid')} ({named.group('name')})" if named else ""
    if "Killed process" in line or "oom-kill" in line:
        return f"killed with SIGKILL by the kernel's OOM killer{where}"
    job = SHELL_KILLED.search(line)
    where = f": process {job.group('pid')} ({job.group('command')[:80]})" if job else ""
    return f"killed with SIGKILL (the shell says Killed){where}"
KILL_EXIT_CODE = -9
# The launcher's two wordings (`Received sigquit from a child process. It usually means …`, `SIGQUIT
# received. …`); never the word alone (`custom_sigquit_handler=None` in every server_args line).
SIGQUIT = re.compile(r"received sigquit|sigquit received", re.IGNORECASE)
# The same, as plain needles (the idle scan is case-sensitive): its writers capitalise it either way.
SIGQUIT_NEEDLES = ("eceived sigquit", "eceived SIGQUIT", "SIGQUIT received", "sigquit received", "Sigquit received")
TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
WHAT = re.compile(r"\s*what\(\):\s+(?P<message>.*)$")
TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
NCCL_TIMEOUT = re.compile(r"\] (?P<message>\[(?:PG [^\]]*)?Rank \d+\] Watchdog caught collective operation timeout.*)$")
DEVICE_ASSERT = "Assertion `"
# Python 3.13 colours tracebacks (file names, line numbers, exception names): SGR and other CSI codes.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Prefixes container runtimes (and wrappers) put before every line: docker compose's `sglang-1  | `,
# the CRI log format's `2026-03-24T12:06:12.101062401+08:00 stderr F `, FastChat's worker log.
CONTAINER_PREFIX = re.compile(r"(?:\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)? (?:stdout|stderr) [FP](?: |$)"
                              r"|[\w.-]{1,40} {0,8}\| ?"
                              # FastChat's workers: `2024-05-26 14:51:19 | ERROR | stderr | `
                              r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \| [A-Z]+ +\| [\w.:-]+ \| ?)")
# Prefixes stack: a CRI record of a container whose compose service, or FastChat worker, prefixes
# its own lines (`2026-…Z stderr F sglang-1  | …`). At most this many are taken off one line.
CONTAINER_DEPTH = 3


def container_end(line: str) -> int:
    """Where the text after the container prefixes (stacked, up to CONTAINER_DEPTH) of `line`
    starts: 0 when it has none."""
    end = 0
    for _ in range(CONTAINER_DEPTH):
        match = CONTAINER_PREFIX.match(line, end)
        if match is None or match.end() == end:
            break
        end = match.end()
        if line[end:end + 1] in ("[", " ", "\t", ""):
            break
    return end


# A `[rank3]:` prefix torchrun puts on every line of a rank's output.
TORCH_RANK_PREFIX = re.compile(r"\[rank(?P<rank>\d+)\]: ?")
# A glog record of C++ code (torch's c10d, NCCL's plugins, Mooncake): `[E1201 10:15:00.000000 …`,
# `E0414 03:56:41.856248 77969 file.cpp:173] …`. Another writer's record, never a line of a Python
# exception's message.
GLOG_RECORD = re.compile(r"\[?[IWEF]\d{3,4} \d\d:\d\d:\d\d\.\d+ ")
# Lines a reporter (or a tool) put in place of frames: `...`, `[... 12 lines omitted ...]`.
ELISION = re.compile(
    r"(?:\.{3,}|…+|\[\s*(?:\.\.\.|…)[^\]]*\]|<\s*(?:\.\.\.|…|truncated|snip)[^>]*>|"
    r"\((?:\.\.\.|…|truncated|omitted)[^)]*\)|\.\.\. ?\(?\d+ (?:more )?(?:lines?|frames?)[^\n]*|"
    r"(?:\.\.\.|…)? ?\(?(?:truncated|omitted|snip(?:ped)?)\)?[^\n]{0,40})$", re.IGNORECASE)
# The innermost frame's source line when the exception line was cut off.
RAISE = re.compile(r"(?:raise (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\(?(?P<message>.*)|assert .*)$")
# Python keywords alone on a line: the source line under a frame whose indentation was lost.
SOURCE_WORDS = frozenset({"raise", "return", "pass", "break", "continue", "yield", "else:", "try:",
                          "finally:"})
# Fatal lines outside any traceback: the process dies (or is dying) and prints no Python
# exception. (label, pattern); the label becomes the crash's exception so rules can name it.
FATAL_LINES = (
    ("Fatal Python error", re.compile(r"Fatal Python error: (?P<message>.+)$")),
    ("fatal signal", re.compile(r"^(?P<message>Current thread 0x[0-9a-fA-F]+ \(most recent call first\):)$")),
    ("Memory access fault", re.compile(r"(?P<message>Memory access fault by GPU.*)$")),
    ("HSA error", re.compile(r"(?P<message>(?:HSA_STATUS_ERROR_\w+|hipError\w+)\b.*)$")),
    ("bind error", re.compile(r"(?P<message>\[Errno 98\].*|.*error while attempting to bind on address.*)$")),
    # The same outside a traceback in other words (an ERROR line, a C++ warning): never an
    # exception line, which belongs to its traceback (or is a bare exception crash itself).
    ("bind error", re.compile(r"^(?!\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b:)"
                              r"(?P<message>.*(?:[Aa]ddress already in use|EADDRINUSE).*)$")),
    ("SWA Pool Mem Leak", re.compile(r"(?P<message>SWA Pool Mem Leak Detected!?.*)$")),
    ("KV pool", re.compile(r"(?P<message>max_total_tokens=\d+ is larger than the profiled value -\d+.*)$")),
    ("GPU hardware error", re.compile(
        r"(?P<message>.*(?:NVRM: Xid \(|\bXid \d+\b|uncorrectable ECC error|GPU has fallen off the bus|"
        r"cudaErrorECCUncorrectable).*)$")),
    ("fatal signal", re.compile(
        r"(?P<message>(?:Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?|"
        r"(?:\*\*\* Error in `[^`]*': )?(?:double free or corruption|free\(\): invalid \w+|corrupted size vs\. prev_size)\b.*|"
        r".*\*\*\* (?:SIGSEGV|SIGABRT|SIGBUS|SIGFPE|SIGILL)\b.*|.*[Cc]aught signal \d+ \(\w.*|.*Segfault encountered.*)$")),
    ("TCPStore", re.compile(r"(?P<message>.*TCPStore\b.*(?:[Bb]roken pipe|[Cc]onnection (?:reset|refused)|"
                            r"failed|timed out|[Tt]imeout).*)$")),
    ("NCCL watchdog", re.compile(r"(?P<message>.*(?:watchdog got stuck|Watchdog caught collective operation "
                                 r"timeout|Heartbeat monitor timed out|Process group watchdog thread terminated "
                                 r"with exception).*)$")),
    # SGLang's coredump reporter (srt/debug_utils/cuda_coredump.py, SGLANG_CUDA_COREDUMP=1): CUDA writes a
    # GPU coredump only on a GPU exception (CUDA_ENABLE_COREDUMP_ON_EXCEPTION), then aborts the process.
    ("CUDA coredump", re.compile(r"(?P<message>CUDA coredump\(s\) detected\b.*)$")),
    # Rust's panic message (std's default hook): `thread 'main' panicked at src/x.rs:51:21:` with the
    # payload on the next line (Rust 1.73+), or `… panicked at 'payload', src/x.rs:51:21` before; the
    # router/gateway and the tokenizer libraries are Rust.
    ("Rust panic", re.compile(r"^(?P<message>thread '[^'\n]{0,80}' panicked at \S.*)$")),
    # CPython's fatal-error dump (Python/pylifecycle.c fatal_error, faulthandler's signal handler, 3.10+):
    # after the stacks, the C extensions loaded, printed only when the interpreter dies this way.
    ("fatal signal", re.compile(r"(?P<message>Extension modules: [\w.]+(?:, [\w.]+)*.*)$")),
    # MLIR's diagnostic for an operation of a kernel being compiled (Triton's passes print it to stderr
    # before the compiler's exception): `loc("…/decode_attention.py":310:16): error: …`.
    ("MLIR error", re.compile(r"(?P<message>loc\(\"[^\"\n]{1,400}\":\d+:\d+\)(?: [^:\n]{0,80})?: error: .+)$")),
)
FATAL_NEEDLES = ("Fatal Python error", "Current thread 0x", "the profiled value -", "double free or corruption",
                 "free(): invalid", "corrupted size vs. prev_size", "Memory access fault by GPU", "HSA_STATUS_ERROR", "[Errno 98]",
                 "attempting to bind on address", "ddress already in use", "EADDRINUSE", "SWA Pool Mem Leak", "Xid", "uncorrectable ECC",
                 "fallen off the bus", "Segmentation fault", "Segfault encountered", "*** SIG", "TCPStore", "NCCL's watchdog got stuck",
                 "Heartbeat monitor timed out", "Caught signal", "Watchdog caught collective",
                 "watchdog thread terminated with exception", "CUDA coredump(s) detected", "' panicked at ",
                 "Extension modules: ", "): error: ")
# argparse's last line: `sglang serve: error: unrecognized arguments: --x` (exit 2, no traceback).
ARGPARSE_ERROR = re.compile(
    r"(?P<prog>[\w./ -]{1,80}?): error: (?P<message>(?:unrecognized arguments|argument -|the following "
    r"arguments are required|invalid choice|ambiguous option|expected one argument)[^\n]*)$")
# The milestones that tell which phase a crash happened in; the last one before it is kept.
# SGLang's `--log-requests` lines: a request's input and output (the user's words, quoted), never a
# report of the server's own failure, whatever crash words a prompt quotes.
REQUEST_LOG_PREFIXES = ("Receive: obj=", "Finish: obj=")
MILESTONE_NEEDLES = ("Init torch distributed begin", "Load weight begin", "Load weight end",
                     "KV Cache is allocated", "Memory pool end", "Capture cuda graph", "CUDA graph begin",
                     "CUDA graph end", "max_total_num_tokens=", "fired up and ready to roll")
MILESTONE = re.compile(r"(?:Init torch distributed begin|Load weight (?:begin|end)|KV Cache is allocated|"
                       r"Memory pool end|Capture [\w ]*?graph (?:begin|end)|max_total_num_tokens=|"
                       r"The server is fired up and ready to roll)", re.IGNORECASE)
MILESTONE_MARK = "last milestone: "
CONTEXT_WORDS = ("rror", "ailed", "arning", "xception")

# Needles whose presence in a tagged line (`[2026-… TP3] …`) means it may matter; untagged lines
# are judged apart (`scan.py`).
TAGGED_NEEDLES = (
    "Traceback (most recent call last):",  # every traceback header
    "It usually means",  # both SIGQUIT wordings of the main process
    "crashed with exit code",
    "died during initialization (exit code:",
    "atchdog timeout (self.watchdog_timeout=",
    # The fatal needles but two that are printed untagged (the kernel's 'fallen off the bus',
    # glibc's 'double free'), where every fatal needle is looked for.
    *(needle for needle in FATAL_NEEDLES if needle not in ("double free or corruption", "fallen off the bus")),
    *MILESTONE_NEEDLES,
    "Killed process", "oom-kill:constraint=",  # the kernel's OOM killer in a dmesg `[12345.6] ` line
    ANNOUNCED_NEEDLE,  # `Scheduler hit an exception: DistBackendError: …` with its error inline
    "\x1b[",  # a coloured line: stripped before anything else looks at it
)


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text) if "\x1b" in text else text


def fatal_line(body: str) -> tuple[str, str] | None:
    """(label, message) when a line outside a traceback announces a fatal failure."""
    if not any(needle in body for needle in FATAL_NEEDLES):
        return None
    for label, pattern in FATAL_LINES:
        found = pattern.search(body)
        if found:
            return label, found.group("message").strip()
    return None


def parse_line(text: str) -> tuple[str | None, str | None, str]:
    """`(timestamp, rank, body)`; timestamp and rank are None for continuation lines."""
    actor = _ACTOR.match(text)
    if actor:
        text = text[actor.end():]
    prefix = _PREFIX.match(text)
    if not prefix:
        return None, None, text
    tags = prefix.group("tags").strip()
    return prefix.group("ts"), tags or None, text[prefix.end():]


def split_exception(line: str, strict: bool) -> tuple[str | None, str] | None:
    """`(type, first message line)` of an exception line, or None when it is not one."""
    match = (STANDALONE_EXCEPTION if strict else EXCEPTION).match(line)
    if not match:
        return None if strict else (None, line)
    return match.group("type"), match.group("message") or ""


def split_wrapper(message: str) -> tuple[str | None, str | None, str | None]:
    """`(wrapper, inner_exception, inner_message)` for `Capture cuda graph failed: <inner>`."""
    match = WRAPPER.match(message)
    if not match:
        return None, None, None
    inner = match.group("inner")
    typed = INNER_TYPE.match(inner)
    if typed:
        return match.group("wrapper"), typed.group("type"), typed.group("message")
    return match.group("wrapper"), None, inner
