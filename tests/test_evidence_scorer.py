"""The evidence scorer (ddtreed/rules/scorer.py): a second layer where the rules leave a crash
open, trained on the development part of the corpus only, advisory only."""

import contextlib
import gc
import importlib.util
import io
import json
import tracemalloc
from pathlib import Path

import pytest

from ddtreed.cli import main
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.rules.scorer import Scorer, ScorerError, features, load_scorer, normalise, package_of, shipped_path, words

ROOT = Path(__file__).parent.parent
CORPUS = ROOT / "tests" / "corpus"
FOUNDING = CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log"
spec = importlib.util.spec_from_file_location("train_evidence_scorer", ROOT / "scripts" / "train_evidence_scorer.py")
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)


def scheduler_crash(innermost: str, code: str, error: str) -> str:
    return ("[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/sglang/srt/managers/scheduler.py", line 100, in event_loop\n'
            "    self.run_batch()\n"
            f'  File "/usr/lib/python3/site-packages/sglang/srt/{innermost}", line 200, in forward\n'
            f"    {code}\n"
            f"{error}\n")


# Wordings no rule knows (a last-resort rule or none decides without the scorer), each with the
# category the scorer places it in.
PLACED = [
    ("model_executor/model_runner.py", "out = self.model(x)",
     "RuntimeError: device-side triton kernel reported an illegal address in forward_extend",
     "illegal-memory-access"),
    ("layers/attention/flashinfer_backend.py", "self.plan(x)",
     "RuntimeError: CUDA reported an illegal address while running the flashinfer plan kernel",
     "illegal-memory-access"),
]
# Words of more than one failure (a kernel that would not launch: a build, a capture or a memory
# fault?): the calibrated scorer is unsure, below its threshold, and the rules' reading stands.
# (Raised in the graph runner: the model retrained with public-l reads the same words under the
# attention backend's frame as SGLang's own `other`, which is no specific reading to hold back.)
AMBIGUOUS = scheduler_crash("model_executor/cuda_graph_runner.py", "out = torch.ops.sgl_kernel.moe_fused_gate(x)",
                            "RuntimeError: Triton kernel launch for sm_120 failed: no kernel image found for this "
                            "architecture")
# Near misses: the same stack and some of the same words, but nothing that says which failure.
NEAR_MISSES = [
    # some of the same words, too few to be sure: below the threshold, the rules' reading stands
    (scheduler_crash("mem_cache/memory_pool.py", "raise RuntimeError(msg)",
                     "RuntimeError: decode retract could not free enough token slots for verify"), "other"),
    (scheduler_crash("mem_cache/memory_pool.py", "raise RuntimeError(msg)",
                     "RuntimeError: retract decode: not enough free token slots left for the verify batch "
                     "(page_size 1)"), "other"),
    (scheduler_crash("layers/moe/fused_moe.py", "out = run(x)",
                     "RuntimeError: the image preprocessor found no architecture field in the request"), "other"),
    (scheduler_crash("managers/scheduler.py", "self.finish(req)",
                     "RuntimeError: request rid-12 was finished twice by the output processor"), "other"),
    (AMBIGUOUS, "other"),
]
# No rule matches a user's own script failing; the corpus files such a crash under `other` (none of
# the failure classes), and so does the scorer, as advice, where `other` is its reading.
# A user's own script (no SGLang frame, no words of a failure class): no rule knows it. Its batch
# handler's frame is what the scorer reads as `other` (a module-level frame alone reads as a failed
# import, the `missing-dependency` family, since the scorer learnt `ifn:<module>` from real reports).
# Its message says what was looked up for a request: the model retrained with public-l reads the bare
# `no entry for …` wording as a refused option (unsupported-config) and the request's words as `other`.
USER_SCRIPT = ('Traceback (most recent call last):\n  File "/home/me/bench.py", line 10, in <module>\n    main()\n'
               '  File "/home/me/bench.py", line 7, in handle_batch\n    out = run(x)\n'
               "LookupError: the request has no entry for the given quux\n")


def diagnose(tmp_path, text: str, scorer=True, rules_dir=None):
    from ddtreed.cli.diagnose_cmd import diagnose_file

    log = tmp_path / "crash.log"
    log.write_text(text)
    rules = load_rules([rules_dir or shipped("rules")], scorer=scorer)
    with contextlib.redirect_stdout(io.StringIO()):
        return diagnose_file(str(log), rules, None)


def cli(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.mark.parametrize("innermost, code, error, category", PLACED)
def test_a_wording_the_rules_miss_is_placed_by_the_scorer_as_advice(tmp_path, innermost, code, error, category):
    text = scheduler_crash(innermost, code, error)
    alone = diagnose(tmp_path, text, scorer=False)[0]
    assert alone.match.category in ("other", "unknown")  # what the rules alone make of it
    diagnosis = diagnose(tmp_path, text)[0]
    assert diagnosis.match.category == category
    assert diagnosis.scorer_decided and diagnosis.decided_by == "evidence-scorer"
    assert diagnosis.match.remediations == ()
    assert diagnosis.confidence == diagnosis.scored.confidence >= diagnosis.scored.threshold
    assert "evidence scorer" in diagnosis.match.diagnosis and diagnosis.scored.top_features


@pytest.mark.parametrize("text, category", NEAR_MISSES)
def test_near_misses_stay_what_the_rules_said(tmp_path, text, category):
    diagnosis = diagnose(tmp_path, text)[0]
    assert diagnosis.match.category == category
    assert not diagnosis.scorer_decided


def test_a_scorer_reading_below_its_threshold_is_shown_as_not_used(tmp_path):
    log = tmp_path / "crash.log"
    log.write_text(AMBIGUOUS)
    _, text = cli("diagnose", str(log), "--explain")
    assert "incident 1: other" in text and "evidence scorer, advisory" not in text
    assert "below its threshold" in text and ": not used" in text


def test_where_no_rule_matched_unknown_stays_unless_the_scorer_clears_its_other_bar(tmp_path):
    """`unknown` (no rule at all) may become the scorer's `other` only at its own bar, chosen by the
    development part's cross-validation among bars of at least even odds (1.0: never). The shipped
    model's bar keeps a crash nothing knows `unknown`; a model with a lower bar names `other` as
    advice: no failure class, no remediation, and the incident says it is the scorer's reading."""
    alone = diagnose(tmp_path, USER_SCRIPT, scorer=False)[0]
    assert alone.match.category == "unknown"
    shipped_model = load_scorer()
    assert shipped_model.other_threshold >= 0.5
    if shipped_model.other_threshold >= 1.0:
        assert diagnose(tmp_path, USER_SCRIPT)[0].match.category == "unknown"
    model = json.loads(Path(shipped_path()).read_text())
    model["other_threshold"] = 0.0
    diagnosis = diagnose(tmp_path, USER_SCRIPT, scorer=Scorer(model))[0]
    assert diagnosis.match.category == "other" and diagnosis.scorer_decided
    assert diagnosis.match.remediations == () and diagnosis.scored.threshold < shipped_model.threshold
    assert "no rule matched; the evidence scorer reads it as other" in diagnosis.match.diagnosis


def test_a_rule_set_without_the_shipped_rules_gets_no_scorer(tmp_path):
    """The model was validated against what the shipped rules leave open: other rule sets alone."""
    (tmp_path / "r.toml").write_text(LAST_RESORT_WITH_A_REMEDIATION.format(priority=1))
    assert load_rules([tmp_path]).scorer is None
    assert load_rules([shipped("rules"), tmp_path]).scorer is not None
    assert load_rules([shipped("rules")], scorer=False).scorer is None


def test_specific_rules_and_the_founding_rule_are_never_second_guessed(tmp_path):
    founding = diagnose(tmp_path, FOUNDING.read_text())[0]
    assert founding.decided_by == "rules" and founding.scored is None
    assert founding.match.rule_id and founding.match.remediations
    port = diagnose(tmp_path, scheduler_crash("managers/scheduler.py", "self.bind()",
                                              "RuntimeError: zmq bind failed: Address already in use"))[0]
    assert port.match.category == "port-in-use" and port.decided_by == "rules" and port.scored is None


LAST_RESORT_WITH_A_REMEDIATION = '''
[[rule]]
id = "catch-all-with-a-fix"
category = "other"
title = "A catch-all that names a remediation"
meaning = "Any RuntimeError at all: a rule that knows only the shape of the failure."
priority = {priority}
diagnosis = "SGLang raised {{detail}}"
remediations = ["disable-cuda-graph"]
[rule.match]
exception = ["RuntimeError"]
message = '(?P<detail>[^\\n]{{0,200}})'
'''


def test_the_scorer_never_selects_a_remediation(tmp_path):
    """A last-resort rule that names a remediation: where the scorer outvotes it, the incident
    carries none (the daemon would only advise); a real rule's remediation is kept."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "catch-all.toml").write_text(LAST_RESORT_WITH_A_REMEDIATION.format(priority=1))
    log = tmp_path / "crash.log"
    innermost, code, error, category = PLACED[0]
    log.write_text(scheduler_crash(innermost, code, error))
    dirs = ("--rules-dir", str(shipped("rules")), "--rules-dir", str(rules_dir))
    status, out = cli("diagnose", str(log), *dirs, "--json")
    incident = json.loads(out)["incidents"][0]
    assert status == 0
    assert incident["category"] == category and incident["decided_by"] == "evidence-scorer"
    assert incident["remediations"] == [] and incident["scorer"]["advisory"] is True
    _, text = cli("diagnose", str(log), *dirs)
    assert "would try:  no automatic remediation; advice only" in text
    # the same rule above the last-resort priority decides, with its remediation
    (rules_dir / "catch-all.toml").write_text(LAST_RESORT_WITH_A_REMEDIATION.format(priority=2))
    _, out = cli("diagnose", str(log), *dirs, "--json")
    incident = json.loads(out)["incidents"][0]
    assert incident["decided_by"] == "rules" and incident["remediations"] == ["disable-cuda-graph"]


def test_explain_marks_a_scorer_decision_and_its_top_features(tmp_path):
    log = tmp_path / "crash.log"
    innermost, code, error, category = PLACED[0]
    log.write_text(scheduler_crash(innermost, code, error))
    status, text = cli("diagnose", str(log), "--explain")
    assert status == 0
    assert f"incident 1: {category} (evidence scorer, advisory)" in text
    assert f"decided:    {category} by the evidence scorer (advisory: no automatic remediation)" in text
    assert "scorer:     top features: " in text and "w:illegal" in text
    assert "outvoted:   other by sglang-internal-error (last-resort rule" in text
    assert "scorer:     " in cli("diagnose", str(log), "--explain")[1]
    _, out = cli("diagnose", str(log), "--json")
    incident = json.loads(out)["incidents"][0]
    assert incident["scorer"]["category"] == category
    assert incident["scorer"]["top_features"][0]["feature"].startswith(("w:", "exc:", "msgfam:", "kind:", "ifn:"))


def test_message_words_are_normalised():
    text = "Tried 0xdeadbeef at /opt/venv/lib/foo.py with shape [4, 8] and 123 tokens: token_to_kv_pool full"
    assert "0x" not in normalise(text) and "123" not in normalise(text) and "/opt" not in normalise(text)
    found = words(text)
    assert {"tried", "shape", "tokens", "token_to_kv_pool", "token", "pool", "full"} <= set(found)
    assert not any(word.isdigit() or "deadbeef" in word or word == "venv" for word in found)


def test_the_shipped_model_is_what_the_development_part_builds():
    """Nobody can train on the test part: the shipped file is exactly what the script builds from
    dev (after changing the assembler or the rules: run scripts/train_evidence_scorer.py)."""
    model, cv = train.build()
    assert train.render(model) == shipped_path().read_text(encoding="utf-8"), \
        "ddtreed/data/evidence-scorer.json is stale: PYTHONPATH=$PWD python scripts/train_evidence_scorer.py"
    split = json.loads((CORPUS / "split.json").read_text())
    assert model["trained_on"]["part"] == "dev" and model["trained_on"]["ids"]
    assert all(split.get(entry_id, "dev") == "dev" for entry_id in model["trained_on"]["ids"])
    # the settings were chosen on held-out folds, and they do not lose to the rules alone there
    assert cv["best"]["right"] >= cv["rules_alone_right"] and cv["best"]["broken"] == 0
    # calibrated: held out, a specific verdict at or above the threshold is right at least that often
    assert cv["best"]["sure"] and cv["best"]["sure_precision"] >= model["threshold"]


def test_test_reports_never_reach_the_training_script(tmp_path):
    """A report the split marks `test` is dropped as its line is read: neither its id nor its text
    reaches what the model is built from."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [{"id": "kept", "category": "cuda-oom", "text": "torch.OutOfMemoryError: CUDA out of memory"},
             {"id": "held-out", "category": "nccl-error", "text": "RuntimeError: zzqheldoutword NCCL failure"}]
    (corpus / "public-a.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (corpus / "split.json").write_text(json.dumps({"kept": "dev", "held-out": "test"}))
    entries = train.development_entries(corpus)
    assert [entry["id"] for entry in entries] == ["kept"]
    assert "zzqheldoutword" not in json.dumps(entries)


@pytest.mark.parametrize("module, package", [
    ("sglang/srt/distributed/parallel_state.py", "sglang.distributed"),
    ("sglang/srt/layers/moe/fused_moe.py", "sglang.layers.moe"),
    ("sglang/srt/mem_cache/memory_pool.py", "sglang.mem_cache"),
    ("sglang/srt/server_args.py", "sglang.server_args"),
    ("torch/distributed/distributed_c10d.py", "torch.distributed"),
    ("flashinfer/jit/core.py", "flashinfer"),
    ("deep_ep/buffer.py", "deep_ep"),
    ("/home/me/bench.py", None),
])
def test_frames_are_read_as_the_kind_of_code_they_are_in(module, package):
    assert package_of(module) == package


def test_the_innermost_frames_say_where_a_cut_off_report_was(tmp_path):
    """A traceback cut off before its exception line still tells the scorer where it was: the
    packages and files of its innermost frames (what carries across wordings), not the message."""
    text = ("[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/sglang/srt/managers/scheduler.py", line 100, in '
            "run_scheduler_process\n"
            "    scheduler = Scheduler()\n"
            '  File "/usr/lib/python3/site-packages/sglang/srt/distributed/parallel_state.py", line 900, in '
            "initialize_model_parallel\n    group = init_model_parallel_group()\n")
    diagnosis = diagnose(tmp_path, text, scorer=False)[0]
    found = features(diagnosis.crash, diagnosis.evidence, ("packages", "innermost"))
    assert {"pkg:sglang.distributed", "ipkg:sglang.distributed", "ifile:parallel_state"} <= found


def test_the_model_is_small_in_memory():
    """The daemon holds the model for its lifetime (read once per process): a budget for it."""
    text = shipped_path().read_text(encoding="utf-8")
    gc.collect()
    tracemalloc.start()
    try:
        scorer = Scorer(json.loads(text), "shipped")
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scorer.classes and held < 1_000_000, f"the evidence model holds {held} bytes"


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    ('{"format": "ddtreed-evidence-scorer/2", "alpha": 1}', "not a valid evidence model"),
    ('["a list"]', "not a valid evidence model"),
    ('{"format": "other/9", "alpha": 1, "threshold": 0.5, "feature_kinds": [], "class_docs": {"a": 1},'
     ' "counts": {"a": {}}}', "format"),
])
def test_a_corrupt_model_is_one_clear_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "evidence-scorer.json"
    path.write_text(content)
    with pytest.raises(ScorerError) as raised:
        load_scorer(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message
    with pytest.raises(ScorerError):
        load_scorer(tmp_path / "missing.json")
