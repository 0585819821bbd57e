"""RuleSet.diagnose on Crash records built directly: representative crash, unknown, explanations."""

from ddtreed.paths import shipped
from ddtreed.records import Crash, Frame, ServiceContext
from ddtreed.rules import load_rules

RULES = load_rules([shipped("rules")])
REPLAY = (Frame("/x/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", 1241, "replay_prepare"),)
WIDTH = "The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0"


def test_nothing_matches_gives_unknown():
    diagnosis = RULES.diagnose((Crash(kind="traceback", exception="PluginHaltedError", message="halted"),))
    assert diagnosis.match.category == "unknown"
    assert diagnosis.match.rule_id == ""
    assert diagnosis.match.remediations == ()
    assert all(not explanation.matched for explanation in diagnosis.explanations)


def test_a_traceback_beats_a_bare_child_death_across_ranks():
    death = Crash(kind="child-death", exception=None, message="Subprocess scheduler_1 crashed with exit code -9",
                  rank="TP1", exit_code=-9)
    traceback = Crash(kind="traceback", exception="RuntimeError", message=WIDTH, frames=REPLAY, rank="TP0")
    diagnosis = RULES.diagnose((death, traceback))
    assert diagnosis.crash is traceback
    assert diagnosis.match.category == "cuda-graph-shape-mismatch"
    assert diagnosis.ranks == ["TP0", "TP1"]


def test_the_inner_error_of_a_wrapper_decides():
    wrapped = Crash(kind="traceback", exception="Exception",
                    message="Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
                    wrapper="Capture cuda graph failed", inner_exception=None,
                    inner_message="CUDA out of memory. Tried to allocate 2.00 GiB")
    diagnosis = RULES.diagnose((wrapped,))
    assert diagnosis.match.category == "cuda-oom"
    assert diagnosis.match.remediations[0] == "lower-cuda-graph-max-bs"


def test_non_memory_inner_error_says_sglang_advice_does_not_apply():
    wrapped = Crash(kind="traceback", exception="Exception", message="Capture cuda graph failed: mat_a must be bf16",
                    wrapper="Capture cuda graph failed", inner_message="mat_a must be bf16")
    match = RULES.diagnose((wrapped,)).match
    assert match.category == "cuda-graph-capture-failed"
    assert "mat_a must be bf16" in match.diagnosis and "does not address it" in match.diagnosis


def test_precise_rule_needs_context_and_explains_why():
    crash = Crash(kind="traceback", exception="RuntimeError", message=WIDTH, frames=REPLAY)
    without = RULES.diagnose((crash,))
    assert without.match.rule_id == "cuda-graph-shape-mismatch" and not without.match.precise
    reasons = next(e for e in without.explanations if e.rule_id == "ddtree-verify-graph-width").reasons
    assert "needs the launch context" in reasons[-1]
    context = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32)
    with_context = RULES.diagnose((crash,), context)
    assert with_context.match.rule_id == "ddtree-verify-graph-width" and with_context.match.precise
    assert with_context.match.params["a"] == 8 and with_context.match.params["b"] == 33


def test_explanations_cover_every_rule():
    crash = Crash(kind="traceback", exception="RuntimeError", message=WIDTH, frames=REPLAY)
    explanations = RULES.diagnose((crash,)).explanations
    assert {e.rule_id for e in explanations} == {rule.id for rule in RULES.rules}
    assert explanations[0].matched
