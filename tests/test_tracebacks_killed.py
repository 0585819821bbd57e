"""A child killed with SIGKILL (the kernel's OOM killer, `kill -9`, a container's memory limit)
prints nothing of its own: the shell's `Killed` line or the kernel's `Out of memory: Killed
process …` is all the log holds. Those lines make a child death of exit code -9 (category `other`,
as SGLang's own `crashed with exit code -9` line does), never a GPU OOM, and never outvote a
traceback printed before them. Real processes killed by a real SIGKILL."""

import subprocess
import sys

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.records import LogChunk
from ddtreed.rules import load_rules
from ddtreed.tracebacks import Assembler

RULES = load_rules([shipped("rules")])
KILL_SELF = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
START = ["[2026-07-28 10:00:00 TP0] Init torch distributed begin.",
         "[2026-07-28 10:00:02 TP0] Load weight begin. avail mem=78.50 GB"]


def shell_output(shell: str) -> list[str]:
    """What a shell prints when the python it runs is killed with SIGKILL."""
    command = f"{sys.executable} -c '{KILL_SELF}'"
    done = subprocess.run([shell, "-c", f"{command}; exit 0"], capture_output=True, text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert any("Killed" in line for line in lines), lines
    return lines


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_a_log_that_ends_in_the_shells_killed_line_is_a_child_killed_with_sigkill(shell):
    diagnoses = diagnose_lines(START + shell_output(shell), "<log>", RULES, None)
    assert len(diagnoses) == 1
    crash = diagnoses[0].crash
    assert (crash.kind, crash.exit_code) == ("child-death", -9)
    assert crash.message.startswith("killed with SIGKILL")
    assert diagnoses[0].match.category == "other"
    assert diagnoses[0].match.rule_id == "worker-died-without-traceback"


@pytest.mark.parametrize("line", [
    "[12345.678901] Out of memory: Killed process 4242 (python3) total-vm:98765432kB, anon-rss:87654321kB",
    "[Tue Dec  1 10:00:09 2026] Memory cgroup out of memory: Killed process 4242 (sglang::schedul) total-vm:1kB",
    "[12345.678901] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),task=python3,pid=4242,uid=0",
])
def test_the_kernels_oom_killer_line_is_host_memory_not_a_gpu_oom(line):
    diagnoses = diagnose_lines(START + [line], "<log>", RULES, None)
    crash = diagnoses[0].crash
    assert (crash.kind, crash.exit_code) == ("child-death", -9)
    assert "OOM killer" in crash.message and line in crash.excerpt
    assert diagnoses[0].match.category == "other"  # never cuda-oom: no GPU memory setting helps
    assert "lower-mem-fraction-static" not in diagnoses[0].match.remediations


def test_a_killed_line_after_a_traceback_is_its_echo():
    lines = START + [
        "[2026-07-28 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 900, in load_model',
        "    self.model = get_model(model_config=self.model_config)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.25 GiB of which 1.10 GiB is free.",
        "",
        *shell_output("sh")]
    diagnosis = diagnose_lines(lines, "<log>", RULES, None)[0]
    assert diagnosis.crash.exception == "torch.OutOfMemoryError"
    assert diagnosis.match.category == "cuda-oom"


def test_words_that_merely_contain_killed_are_no_crash():
    lines = START + ["Killed 3 idle connections", "the model Killed it", "[2026-07-28 10:00:03 TP0] Load weight end."]
    assert diagnose_lines(lines, "<log>", RULES, None) == []


def test_the_daemons_eager_assembler_reports_the_kill():
    assembler = Assembler(eager=True)
    assembler.feed(LogChunk("server.log", 1, tuple(START), 0.0))
    assembler.feed(LogChunk("server.log", 3, tuple(shell_output("bash")), 1.0))
    groups = assembler.take(1.0)
    assert [(crash.kind, crash.exit_code) for group in groups for crash in group] == [("child-death", -9)]


@pytest.mark.parametrize("notice", ["Received sigquit from a child process. It usually means the child failed.",
                                    "SIGQUIT received. signum=None, frame=None. It usually means one child failed."])
def test_the_launchers_sigquit_notice_without_its_log_prefix_is_a_childs_death(notice):
    # A paste (or a wrapper's log) that dropped SGLang's `[time] ` prefix: the notice still says a child died.
    lines = ["Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.02, #running-req: 0,",
             notice]
    [diagnosis] = diagnose_lines(lines, "<paste>", RULES, None)
    assert (diagnosis.crash.kind, diagnosis.crash.message) == ("child-death", notice)
    assert diagnosis.match.rule_id == "worker-died-without-traceback"


def test_a_fatal_signal_dump_that_names_sigquit_stays_a_fatal_signal():
    lines = ["*** SIGQUIT received at time=1764670000 on cpu 3 ***",
             "PC: @     0x7f1d2c0a1e2e  (unknown)  pthread_cond_wait@@GLIBC_2.3.2"]
    diagnoses = diagnose_lines(lines, "<paste>", RULES, None)
    assert diagnoses and diagnoses[0].crash.kind == "error-line"
