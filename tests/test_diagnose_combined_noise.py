"""Noise that comes together in real pastes, each part of which `tests/perturbations.py` applies
alone:

- an error copied from a rendered page (indentation lost, a blank line after every line) and then
  quoted in a reply (`> ` on each line, `>` alone on the blank ones): the quote marks hid the
  doubled breaks; once they are off, the blank lines go too;
- a collected log (journalctl's, kubectl's, docker's, srun's prefix on every line) quoted in a
  reply: the quote comes off before the collector's prefix is looked for, and a blank line's
  prefix, stripped of its trailing space with the quote, is a prefix too;
- error lines outside any traceback (a transfer engine's glog records) behind torchrun's `[rank3]:`:
  the prefix comes off and says the rank;
- a copy from a rendered page pasted into text of single breaks (a Markdown fence, SGLang's issue
  template): the run of lines one blank apart loses its blanks, the text around it keeps its own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import perturbations as p
from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks.collectors import uncollected
from ddtreed.tracebacks.error_lines import error_line_crashes
from ddtreed.tracebacks.paste import undouble, unquote
from dev_reports import right_as_pasted_and_perturbed

RULES = load_rules([shipped("rules")])
ROOT = Path(__file__).resolve().parent.parent
SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
TRACEBACK = f"""[2026-03-02 10:00:44 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "{SITE}/model_executor/model_runner.py", line 410, in load_model
    self.model = get_model(model_config=self.model_config, load_config=self.load_config)
  File "{SITE}/model_loader/loader.py", line 370, in load_model
    model.load_weights(self._get_all_weights(model_config, model))
  File "{SITE}/models/llama.py", line 508, in load_weights
    param = params_dict[name]
KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'
"""


def diagnose(text: str):
    return diagnose_lines(text.splitlines(), "<paste>", RULES, None)


def copied_and_quoted(text: str) -> str:
    return p.quoted(p.double_spaced(p.dedent(text)))


def test_a_quoted_double_spaced_paste_loses_its_quote_marks_and_its_doubled_breaks():
    read = unquote(copied_and_quoted(TRACEBACK).splitlines())
    while read and not read[-1]:
        read.pop()  # the blank after the last line
    assert read == p.dedent(TRACEBACK).splitlines()


def test_a_weight_load_failure_copied_from_a_page_and_quoted_is_still_a_model_load_error():
    diagnosis = diagnose(copied_and_quoted(TRACEBACK))[0]
    assert diagnosis.match.category == "model-load-error"
    assert diagnosis.crash.exception == "KeyError"
    assert diagnosis.crash.frames[-1].function == "load_weights"


@pytest.mark.parametrize("entry_id", [
    "gptoss-flashinfer-0210-capture-weight-scale-vec-size",
    "dsv41-flash-engram-sps-capture-equal-block",
    "qwen35-35b-eagle-cow-mamba-false-leak-check-memory",
    "moe-w2-weight-scale-keyerror-loader-frames",
])
def test_a_real_report_copied_from_a_page_and_quoted_keeps_its_category(entry_id):
    right_as_pasted_and_perturbed(entry_id, copied_and_quoted, diagnose)


def collected_and_quoted(collector):
    return lambda text: p.quoted(collector(text))


def test_a_blank_line_of_a_quoted_journal_loses_its_prefix_too():
    lines = ["Dec 01 12:00:00 gpu-node-3 python3[1234]: Fatal Python error: Segmentation fault",
             "Dec 01 12:00:00 gpu-node-3 python3[1234]:",
             "Dec 01 12:00:00 gpu-node-3 python3[1234]: Current thread 0x00007f4858f86740 (most recent call first):"]
    assert uncollected(lines) == ["Fatal Python error: Segmentation fault", "",
                                  "Current thread 0x00007f4858f86740 (most recent call first):"]


@pytest.mark.parametrize("collector", ["journald-prefix", "kubectl-prefix", "docker-timestamps", "srun-label"])
def test_a_quoted_collected_weight_load_failure_is_still_a_model_load_error(collector):
    diagnosis = diagnose(collected_and_quoted(p.PERTURBATIONS[collector])(TRACEBACK))[0]
    assert diagnosis.match.category == "model-load-error"
    assert diagnosis.crash.exception == "KeyError"


@pytest.mark.parametrize("collector,entry_id", [
    ("journald-prefix", "qwen3-embedding-keyerror-embed-tokens"),
    ("journald-prefix", "dsv2-lite-a40-segfault-nccl-comm-init-rank"),
    ("kubectl-prefix", "qwen3-safetensors-load-bus-error"),
    ("kubectl-prefix", "llama4-scout-custom-allreduce-register-graph-buffers-invalid-arg"),
])
def test_a_real_report_collected_and_quoted_keeps_its_category(collector, entry_id):
    right_as_pasted_and_perturbed(entry_id, collected_and_quoted(p.PERTURBATIONS[collector]), diagnose)


def copied_into_the_template(text: str) -> str:
    return p.in_issue_template(p.double_spaced(p.dedent(text)))


def test_a_doubled_copy_inside_a_fence_loses_its_blanks_and_the_template_keeps_its_own():
    read = undouble(copied_into_the_template(TRACEBACK).splitlines())
    start = read.index("```") + 1
    assert read[start:start + len(TRACEBACK.splitlines())] == p.dedent(TRACEBACK).splitlines()
    assert read[:4] == ["### Describe the bug", "", "The server stops with the output below.", ""]


def test_a_few_lines_one_blank_apart_are_the_texts_own_breaks():
    lines = ["Traceback (most recent call last):", '  File "x.py", line 3, in f', "KeyError: 'a'", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", '  File "x.py", line 5, in g', "RuntimeError: b"]
    assert undouble(lines) == lines


def test_a_weight_load_failure_copied_from_a_page_into_the_issue_template_is_a_model_load_error():
    diagnosis = diagnose(copied_into_the_template(TRACEBACK))[0]
    assert diagnosis.match.category == "model-load-error"
    assert diagnosis.crash.frames[-1].function == "load_weights"


@pytest.mark.parametrize("entry_id", [
    "gptoss-flashinfer-0210-capture-weight-scale-vec-size",
    "main-transformers-backends-mapping-valueerror",
    "moe-w2-weight-scale-keyerror-loader-frames",
    "hicache-mtp-mooncake-store-draft-write-assert",
])
def test_a_real_report_copied_from_a_page_into_the_issue_template_keeps_its_category(entry_id):
    right_as_pasted_and_perturbed(entry_id, copied_into_the_template, diagnose)


def test_the_robustness_benchmark_measures_combined_noise_on_its_own():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "diagnose_robustness.py"), "--combined",
                             "--only", "journald+quoted", "--ids"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report["perturbations"]) == ["journald+quoted"]
    row = report["perturbations"]["journald+quoted"]
    assert row["applicable"] == report["right_as_pasted"] > 300
    assert row["broken"] == []


def test_every_combination_is_made_of_named_noise():
    assert "newest-first" in p.COMBINED
    singles = set(p.PERTURBATIONS) | {"newest-first", "journald", "torchrun", "kubectl", "compose", "cri"}
    for name in p.COMBINED:
        assert set(name.split("+")) <= singles | {n.removesuffix("-prefix") for n in p.PERTURBATIONS}, name


GLOG = """[rank3]:[2026-03-02 10:05:00 TP3] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 0
[rank3]:E0302 10:05:01.856248 77969 transfer_metadata_plugin.cpp:173] Unexpected code in http response, GET http://10.0.0.5:8998/metadata?key=mooncake%2Fram%2F10.0.0.6_58f3 response code: 404 response body: metadata not found
[rank3]:W0302 10:05:01.856264 77969 transfer_metadata.cpp:153] Failed to retrieve segment descriptor, name 10.0.0.6_58f3
[rank3]:E0302 10:05:01.856300 77969 transfer_engine.cpp:420] Failed to open segment 10.0.0.6_58f3
"""


def test_a_glog_error_record_behind_torchruns_rank_prefix_is_an_error_line_of_that_rank():
    crashes = error_line_crashes(GLOG.splitlines(), "<paste>")
    assert [crash.first_line for crash in crashes] == [2, 4]
    assert {crash.rank for crash in crashes} == {"3"}
    assert crashes[0].message.startswith("E0302 10:05:01.856248 77969 transfer_metadata_plugin.cpp:173]")


def test_a_real_transfer_failure_behind_torchruns_rank_prefix_keeps_its_category():
    right_as_pasted_and_perturbed("mooncake-pd-transfer-return-error-segment-descriptor-metadata-404-pr-4880",
                                  p.torchrun, diagnose)
