"""A bare death (a child that exited, a killed service) has no words of its own: the communication
WARN lines its assembler kept as context are the evidence that decides it."""

from ddtreed.paths import shipped
from ddtreed.records import Crash
from ddtreed.rules import load_rules

RULES = load_rules([shipped("rules")])
NCCL_WARN = ("node1:1234:5678 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
             "10.1.1.1<38017> failed : Software caused connection abort")
DEATH = ("Rank 0 scheduler died during initialization (exit code: -6). If exit code is -9 (SIGKILL), "
         "a common cause is the OS OOM killer.")


def death(*context: str, kind: str = "child-death") -> Crash:
    return Crash(kind=kind, exception=None, message=DEATH, exit_code=-6, context=context)


def test_a_death_after_nccl_warn_lines_is_a_communication_failure():
    diagnosis = RULES.diagnose((death(NCCL_WARN, "last milestone: Load weight end. mem usage=15.3 GB"),))
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("nccl-error", "child-died-after-comm-warnings")
    assert "comm-failure" in diagnosis.evidence.message_families


def test_a_killed_service_after_a_c10d_store_error_line_is_a_communication_failure():
    line = ("[E1201 10:00:00 TCPStore.cpp:1050] [c10d] TCP client failed to connect/validate to host "
            "10.0.0.1:29500 - timed out (try=0, timeout=600000ms)")
    diagnosis = RULES.diagnose((death(line, kind="killed"),))
    assert diagnosis.match.category == "nccl-error"


def test_other_warnings_before_a_death_do_not_decide_it():
    warning = "WARNING: speculative decoding with --enable-mixed-chunk is not supported with this backend"
    diagnosis = RULES.diagnose((death(warning, "last milestone: Load weight end. mem usage=15.3 GB"),))
    assert diagnosis.match.category == "other"


def test_a_traceback_keeps_its_own_error_over_warn_lines_before_it():
    crash = Crash(kind="traceback", exception="KeyError", message="'rid-1'", context=(NCCL_WARN,))
    diagnosis = RULES.diagnose((crash,))
    assert diagnosis.match.category == "other"
    assert "comm-failure" not in diagnosis.evidence.message_families
