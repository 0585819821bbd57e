"""The noise real pastes and log collectors add to a crash text, one transformation at a time.

Each function takes a report's text (lines joined by `\\n`) and returns it as it would reach
`ddtreed diagnose` after that one change: a container runtime's or a log collector's prefix on
every line, colour codes, other line ends or indentation, a Markdown quote or fence, another
installation's paths, other numbers or model names, a second rank printing the same traceback.
None of them changes what failed, so a diagnosis that is right before should be right after.

Written from what the tools print (the CRI log format, `docker compose logs`, `journalctl`,
`kubectl logs --prefix`, CPython 3.13's coloured tracebacks, SGLang's own rank prefix), never
from what the diagnosis code reads: `benchmarks/diagnose_robustness.py` runs them over the
development part of the corpus and the data-tier tests over a few of its reports.
"""

from __future__ import annotations

import re
from typing import Callable

HEADER = "Traceback (most recent call last):"
CHAIN_MARKERS = ("During handling of the above exception, another exception occurred:",
                 "The above exception was the direct cause of the following exception:")
# SGLang's own prefix: `[2026-01-01 00:00:00 TP3] `, `[2026-01-01 00:00:00] ` (the main process).
LOG_PREFIX = re.compile(r"\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"
                        r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?")
ADDED_PREFIX = "[2026-01-01 00:00:00 TP3] "


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _every_line(prefix: str) -> Callable[[str], str]:
    def perturb(text: str) -> str:
        return "\n".join(prefix + line for line in _lines(text))
    return perturb


# --- collectors -------------------------------------------------------------------------------

cri = _every_line("2026-01-17T18:48:10.417752845+01:00 stderr F ")  # a node's /var/log/pods file
compose = _every_line("sglang-1  | ")  # docker compose logs
journald = _every_line("Dec 01 12:00:00 gpu-node-3 python3[1234]: ")  # journalctl -u sglang
kubectl = _every_line("[pod/sglang-0/sglang] ")  # kubectl logs --prefix
torchrun = _every_line("[rank3]:")  # torchrun's --tee / local_ranks_filter prefix
docker_timestamps = _every_line("2026-01-17T18:48:10.417752845Z ")  # docker logs -t
srun_label = _every_line("3: ")  # Slurm's srun --label
mpirun_tag = _every_line("[1,3]<stderr>:")  # Open MPI's mpirun --tag-output


# --- colour -------------------------------------------------------------------------------------

_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.*)$')
_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?P<rest>(?::.*)?)$")
_MAGENTA, _BOLD_MAGENTA, _RED, _RESET = "\x1b[35m", "\x1b[1;35m", "\x1b[31m", "\x1b[0m"


def ansi_python313(text: str) -> str:
    """CPython 3.13's coloured traceback: file, line number and function in magenta, the exception
    type bold magenta and its message magenta, the carets red."""
    out = []
    for line in _lines(text):
        frame = _FRAME.match(line)
        exception = _EXCEPTION.match(line)
        if frame:
            line = (f'{frame["indent"]}File {_MAGENTA}"{frame["file"]}"{_RESET}, line {_MAGENTA}{frame["line"]}'
                    f'{_RESET}, in {_MAGENTA}{frame["function"]}{_RESET}')
        elif exception:
            rest = exception["rest"]
            message = f": {_MAGENTA}{rest[1:].lstrip()}{_RESET}" if rest[1:].strip() else rest
            line = f"{_BOLD_MAGENTA}{exception['type']}{_RESET}{message}"
        elif line.strip() and not line.strip().strip("^~"):
            line = line.replace(line.strip(), f"{_RED}{line.strip()}{_RESET}")
        out.append(line)
    return "\n".join(out)


def ansi_lines(text: str) -> str:
    """A terminal or collector that colours every line of stderr (red), and a logger that colours
    its level names (`\\x1b[31mERROR\\x1b[0m`)."""
    out = []
    for line in _lines(text):
        for level, colour in (("ERROR", "\x1b[31;1m"), ("WARNING", "\x1b[33;1m"), ("INFO", "\x1b[32m")):
            line = re.sub(rf"\b{level}\b", f"{colour}{level}{_RESET}{_RED}", line)
        out.append(f"{_RED}{line}{_RESET}" if line else line)
    return "\n".join(out)


# --- line ends, indentation, blank lines --------------------------------------------------------

def crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def tabs(text: str) -> str:
    """Each two-space step of leading indentation a tab (an editor, a web form)."""
    out = []
    for line in _lines(text):
        body = line.lstrip(" ")
        spaces = len(line) - len(body)
        out.append("\t" * ((spaces + 1) // 2) + body)
    return "\n".join(out)


def dedent(text: str) -> str:
    """Every line's leading whitespace lost (a chat client, an issue form without a code block)."""
    return "\n".join(line.lstrip() for line in _lines(text))


def double_spaced(text: str) -> str:
    """A blank line after every line (copied from a rendered web page)."""
    return "\n\n".join(_lines(text))


# --- Markdown ---------------------------------------------------------------------------------

def quoted(text: str) -> str:
    """A GitHub reply that quotes the error (`> ` on every line, `>` on blank ones)."""
    return "\n".join("> " + line if line.strip() else ">" for line in _lines(text))


def fenced(text: str) -> str:
    return "```text\n" + text.rstrip("\n") + "\n```\n"


def in_issue_template(text: str) -> str:
    """The paste inside SGLang's bug-report template (headings, a sentence, the environment)."""
    return ("### Describe the bug\n\nThe server stops with the output below.\n\n### Reproduction\n\n```\n"
            + text.rstrip("\n") + "\n```\n\n### Environment\n\nPython 3.12, CUDA 12.8, 8 GPUs\n")


def details(text: str) -> str:
    return ("<details>\n<summary>Full error log</summary>\n\n```\n" + text.rstrip("\n")
            + "\n```\n\n</details>\n")


# --- SGLang's rank prefix -----------------------------------------------------------------------

def _traceback_roles(lines: list[str]) -> list[str]:
    """Per line: "header", "body" (frames, source, the exception line and its message) or "other".
    Read as Python prints a traceback, independently of the diagnosis code."""
    roles, state = [], "other"
    for line in lines:
        stripped = line.strip()
        if stripped.endswith(HEADER):
            roles.append("header")
            state = "frames"
        elif state == "frames":
            roles.append("body")
            if stripped and not line[:1].isspace() and not stripped.startswith(("File ", "...", "^")):
                state = "message"  # the exception line
        elif state == "message":
            if not stripped:
                state = "other"
                roles.append("other")
            elif stripped in CHAIN_MARKERS:
                state = "chain"
                roles.append("body")
            elif LOG_PREFIX.match(line):
                state = "other"
                roles.append("other")
            else:
                roles.append("body")
        elif state == "chain":
            roles.append("body" if not stripped or stripped in CHAIN_MARKERS else "other")
        else:
            roles.append("other")
    return roles


def rank_prefix_added(text: str) -> str:
    """SGLang's `[time TP3] ` before each traceback header that was pasted without it (the rest of
    a traceback is printed unprefixed, as SGLang prints it)."""
    lines = _lines(text)
    roles = _traceback_roles(lines)
    return "\n".join(ADDED_PREFIX + line.lstrip() if role == "header" and not LOG_PREFIX.match(line.lstrip())
                     else line for line, role in zip(lines, roles))


def rank_prefix_removed(text: str) -> str:
    """Every `[time TP3] ` prefix taken off (a viewer that hides timestamps, a reporter who cut them)."""
    return "\n".join(LOG_PREFIX.sub("", line, count=1) if LOG_PREFIX.match(line) else line for line in _lines(text))


def rank_retagged(text: str) -> str:
    """Other ranks and parallel layout in the prefixes: `TP0` → `DP1 TP3 EP3`, milliseconds on."""
    def retag(match: re.Match) -> str:
        tags = " DP1 TP3 EP3" if match["tags"] else ""
        stamp = match["ts"] if re.search(r"[.,]\d+$", match["ts"]) else match["ts"] + ".417"
        return f"[{stamp}{tags}] "
    return "\n".join(LOG_PREFIX.sub(retag, line, count=1) if LOG_PREFIX.match(line) else line for line in _lines(text))


# --- installations -----------------------------------------------------------------------------

_SITE = re.compile(r"(?:/[\w.@+~-]+)*?/(?:lib/python3\.\d+/(?:site|dist)-packages|sglang/python)/")


def _paths_to(root: str, sglang_root: str | None = None) -> Callable[[str], str]:
    def perturb(text: str) -> str:
        def rewrite(match: re.Match) -> str:
            after = text[match.end():match.end() + 7]
            return sglang_root if sglang_root and after == "sglang/" else root
        return _SITE.sub(rewrite, text)
    return perturb


paths_conda = _paths_to("/opt/conda/lib/python3.10/site-packages/")
paths_dist = _paths_to("/usr/local/lib/python3.12/dist-packages/")
paths_source = _paths_to("/usr/local/lib/python3.12/dist-packages/", "/sgl-workspace/sglang/python/")


# --- numbers and names -------------------------------------------------------------------------

def _other(number: str) -> str:
    """Another value of the same kind: 0 and 1 (singleton dimensions, flags) stay."""
    value = int(number)
    return number if value <= 1 else str(value * 2 + 2)


_SIZE = re.compile(r"(?<![\w.])(?P<value>\d+(?:\.\d+)?)(?P<unit> ?(?:GiB|MiB|KiB|GB|MB|KB|bytes)\b)")
_SHAPE = re.compile(r"(?<=[\[(])(?P<items>\d+(?:, ?-?\d+)*)(?=[\])])")
_RANK = re.compile(r"(?P<word>\b(?:[Rr]ank|RANK|local_rank|tp_rank|device|GPU|gpu|cuda:|npu:)[ =:]?)(?P<value>\d+)\b")
_TAG = re.compile(r"(?<= )(?P<word>TP|DP|EP|PP)(?P<value>\d+)(?=[\] ])")
_FRAME_LINE = re.compile(r'(?P<head>File "[^"]*", line )(?P<value>\d+)')


def numbers_sizes(text: str) -> str:
    """Other memory sizes (`Tried to allocate 448.00 MiB` → `896.00 MiB`)."""
    def size(match: re.Match) -> str:
        value = match["value"]
        decimals = len(value.split(".")[1]) if "." in value else 0
        return f"{float(value) * 2 + 2:.{decimals}f}{match['unit']}"
    return _SIZE.sub(size, text)


def numbers_shapes(text: str) -> str:
    """Other tensor sizes and shapes (`(8)`, `[4, 4096]`, `torch.Size([2, 16])`)."""
    return _SHAPE.sub(lambda m: re.sub(r"\d+", lambda n: _other(n.group()), m["items"]), text)


def numbers_ranks(text: str) -> str:
    """Another rank or device failed (`rank 3`, `cuda:3`, `TP3`)."""
    shift = lambda m: m["word"] + str(int(m["value"]) + 3)  # noqa: E731
    return _TAG.sub(shift, _RANK.sub(shift, text))


_COUNT = re.compile(r"(?P<word>(?<![\w.])[a-z_]+(?:_size|_len|_tokens|_num|num_\w+|_bs|bs)=)(?P<value>\d+)\b"
                    r"|(?P<value2>\d+)(?P<unit2> (?:tokens|rows|elements|blocks|heads|layers|experts|requests"
                    r"|pages)\b)")


def numbers_counts(text: str) -> str:
    """Other counts (`max_total_tokens=1234`, `576 rows`, `num_heads=32`)."""
    def count(match: re.Match) -> str:
        if match["word"]:
            return match["word"] + _other(match["value"])
        return _other(match["value2"]) + match["unit2"]
    return _COUNT.sub(count, text)


def frame_line_numbers(text: str) -> str:
    """Another release of the same code: every frame's line number moved."""
    return _FRAME_LINE.sub(lambda m: m["head"] + str(int(m["value"]) + 37), text)


_ORGS = ("Qwen", "meta-llama", "deepseek-ai", "mistralai", "google", "microsoft", "moonshotai", "zai-org",
         "THUDM", "openai", "nvidia", "MiniMaxAI", "RedHatAI", "neuralmagic", "unsloth", "lmsys", "XiaomiMiMo",
         "baidu", "tencent", "stepfun-ai", "ByteDance-Seed", "BAAI", "Alibaba-NLP", "OpenGVLab", "llava-hf",
         "nvidia", "amd", "inclusionAI", "internlm", "01-ai", "ibm-granite", "allenai", "jinaai", "Intel")
_FAMILIES = ("Qwen", "Llama", "Meta-Llama", "DeepSeek", "Deepseek", "deepseek", "Mistral", "Mixtral", "gemma",
             "Gemma", "Phi", "GLM", "glm", "Kimi", "MiniMax", "gpt-oss", "Yi", "InternLM", "InternVL", "MiMo",
             "ERNIE", "Hunyuan", "Devstral", "Granite", "OLMo", "Nemotron", "Llava", "llava", "qwen", "llama")
# An organisation's repo id (`Qwen/Qwen3-8B`), or a release name (a family, a hyphen, more: `Qwen3-32B`,
# `Llama-3.1-8B-Instruct`), never an architecture or a module (`Qwen2ForCausalLM`, `qwen2.py`).
_MODEL = re.compile(r"(?<![\w.-])(?:(?:" + "|".join(map(re.escape, _ORGS)) + r")/[\w.-]+"
                    r"|(?:" + "|".join(map(re.escape, _FAMILIES)) + r")[\w.]*-[\w.-]*[\w])(?![\w-])")


def model_names(text: str) -> str:
    """Another model served: repo ids and release names replaced by one no rule can know."""
    def rename(match: re.Match) -> str:
        return "acme-ai/Lumen-7B-Chat" if "/" in match.group() else "Lumen-7B-Chat"
    return _MODEL.sub(rename, text)


# --- two ranks -----------------------------------------------------------------------------------

def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) of each traceback: its header line through its message."""
    roles = _traceback_roles(lines)
    blocks, start = [], None
    for index, role in enumerate(roles + ["other"]):
        if role == "header":
            if start is not None:
                blocks.append((start, index))
            start = index
        elif role == "other" and start is not None:
            blocks.append((start, index))
            start = None
    return blocks


def _as_rank(line: str, rank: int) -> str:
    found = LOG_PREFIX.match(line)
    if found:
        return f"[{found['ts']} TP{rank}] " + line[found.end():]
    return f"[2026-01-01 00:00:00 TP{rank}] " + line.lstrip()


def two_ranks_sequential(text: str) -> str:
    """A second rank printing the same traceback right after the first (rank-prefixed headers)."""
    lines = _lines(text)
    for first, end in reversed(_blocks(lines)):
        one = [_as_rank(lines[first], 0)] + lines[first + 1:end]
        two = [_as_rank(lines[first], 1)] + lines[first + 1:end]
        lines[first:end] = one + two
    return "\n".join(lines)


def two_ranks_interleaved(text: str) -> str:
    """Two ranks crashing at once, as the founding log shows: both headers, then both bodies."""
    lines = _lines(text)
    for first, end in reversed(_blocks(lines)):
        body = lines[first + 1:end]
        lines[first:end] = [_as_rank(lines[first], 1), _as_rank(lines[first], 0)] + body + body
    return "\n".join(lines)


PERTURBATIONS: dict[str, Callable[[str], str]] = {
    "cri-prefix": cri, "compose-prefix": compose, "journald-prefix": journald, "kubectl-prefix": kubectl,
    "torchrun-rank-prefix": torchrun, "docker-timestamps": docker_timestamps, "srun-label": srun_label,
    "mpirun-tag-output": mpirun_tag,
    "ansi-python313": ansi_python313, "ansi-lines": ansi_lines,
    "crlf": crlf, "tabs": tabs, "dedent": dedent, "double-spaced": double_spaced,
    "quoted": quoted, "fenced": fenced, "details": details, "in-issue-template": in_issue_template,
    "rank-prefix-added": rank_prefix_added, "rank-prefix-removed": rank_prefix_removed,
    "rank-retagged": rank_retagged,
    "paths-conda": paths_conda, "paths-dist": paths_dist, "paths-source": paths_source,
    "numbers-sizes": numbers_sizes, "numbers-shapes": numbers_shapes, "numbers-ranks": numbers_ranks,
    "numbers-counts": numbers_counts,
    "frame-line-numbers": frame_line_numbers, "model-names": model_names,
    "two-ranks-sequential": two_ranks_sequential, "two-ranks-interleaved": two_ranks_interleaved,
}


# --- several at once ----------------------------------------------------------------------------

def newest_first(text: str) -> str:
    """A log viewer's newest-first order (Grafana/Loki, a cloud console): every line, upside down."""
    return "\n".join(reversed(_lines(text)))


def _chain(*steps: Callable[[str], str]) -> Callable[[str], str]:
    def perturb(text: str) -> str:
        for step in steps:
            text = step(text)
        return text
    return perturb


# Noise that comes together, in the order it is added: what printed the lines (a collector's or a
# launcher's prefix), what showed them (a viewer's order, a rendered page's lost indentation and
# doubled breaks), then how they were pasted (a quote, a fence, the issue template). Measured apart
# from PERTURBATIONS (`benchmarks/diagnose_robustness.py --combined`), whose count stays the one of
# single transformations.
COMBINED: dict[str, Callable[[str], str]] = {
    "newest-first": newest_first,
    "dedent+newest-first": _chain(dedent, newest_first),
    "journald+newest-first": _chain(journald, newest_first),
    "torchrun+newest-first": _chain(torchrun, newest_first),
    "kubectl+newest-first+quoted": _chain(kubectl, newest_first, quoted),
    "two-ranks-interleaved+newest-first": _chain(two_ranks_interleaved, newest_first),
    "journald+quoted": _chain(journald, quoted),
    "docker-timestamps+quoted": _chain(docker_timestamps, quoted),
    "srun-label+quoted": _chain(srun_label, quoted),
    "compose+dedent+fenced": _chain(compose, dedent, fenced),
    "cri+dedent+double-spaced+quoted": _chain(cri, dedent, double_spaced, quoted),
    "dedent+double-spaced+quoted": _chain(dedent, double_spaced, quoted),
    "dedent+double-spaced+fenced": _chain(dedent, double_spaced, fenced),
    "dedent+double-spaced+in-issue-template": _chain(dedent, double_spaced, in_issue_template),
    "tabs+ansi-lines+compose": _chain(tabs, ansi_lines, compose),
    "rank-prefix-removed+dedent+cri": _chain(rank_prefix_removed, dedent, cri),
}
