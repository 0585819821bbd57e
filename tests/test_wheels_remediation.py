"""The founding patch and the flag table against the real sglang wheels from PyPI.

The patched width logic is executed in isolation (ast-extracted, fake model runner / server
args), side by side with the unpatched original: only a DDTree target changes, to budget + 1.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import wheels
from ddtreed.service.host import LocalHost
from ddtreed.paths import shipped
from ddtreed.remediation import ApplyError, Engine, inspect_ddtree_width, load_remediations
from ddtreed.remediation import flags
from ddtreed.remediation.sitepackages import record_hash

pytestmark = pytest.mark.wheels
REPO = Path(__file__).resolve().parent.parent
ID = "ddtree-verify-graph-width"
BLOCK, BUDGET = 8, 32

# version -> (expected layout, file, how the width is computed there)
LAYOUTS = {
    "0.5.9": ("cuda-graph-runner-eagle", "sglang/srt/model_executor/cuda_graph_runner.py", "init"),
    "0.5.12": ("cuda-graph-runner-speculative", "sglang/srt/model_executor/cuda_graph_runner.py", "init"),
    "0.5.13": ("cuda-graph-runner-hook", "sglang/srt/model_executor/cuda_graph_runner.py", "init"),
    "0.5.14": ("decode-cuda-graph-runner-hook",
               "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", "init"),
    "0.5.15": ("model-runner-decode-num-tokens-per-bs", "sglang/srt/model_executor/model_runner.py",
               "decode_num_tokens_per_bs"),
    "0.5.16": ("spec-utils-server-args", "sglang/srt/speculative/spec_utils.py", "resolve_num_tokens_per_req"),
    "0.5.20": ("spec-utils-spec-bag", "sglang/srt/speculative/spec_utils.py", "resolve_num_tokens_per_req"),
    "0.5.23": ("spec-utils-spec-bag", "sglang/srt/speculative/spec_utils.py", "resolve_num_tokens_per_req"),
}


class FakeAlgorithm:
    """Stands in for SpeculativeAlgorithm. DDTREE counts as DFlash- and EAGLE-family, so even the
    0.5.9 layout (which only routes EAGLE-like algorithms to the verify branch) reaches it, as any
    DDTree backport must."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attribute: str):
        if not attribute.startswith("is_"):
            raise AttributeError(attribute)
        kind = attribute[3:]
        family = {"DDTREE": {"dflash", "eagle"}}.get(self.name, set())
        return lambda: kind == "speculative" or kind == self.name.lower() or kind in family

    def supports_target_verify_for_draft(self) -> bool:
        return self.name in ("DFLASH", "DDTREE")

    def get_num_tokens_per_bs_for_target_verify(self, num_draft_tokens, is_draft_worker):
        return num_draft_tokens

    get_num_tokens_per_req_for_target_verify = get_num_tokens_per_bs_for_target_verify


def _server_args(algorithm: str) -> SimpleNamespace:
    values = dict(speculative_algorithm=algorithm, speculative_num_draft_tokens=BLOCK,
                  speculative_eagle_topk=4, enable_return_hidden_states=False)
    if algorithm == "DDTREE":  # released ServerArgs have no such attribute at all
        values["speculative_ddtree_budget"] = BUDGET
    return SimpleNamespace(**values)


def _function(tree: ast.Module, name: str, line: int | None = None) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            if line is None or node.lineno <= line <= node.end_lineno:
                return node
    raise AssertionError(f"no function {name}")


def width(source: str, mode: str, anchor_line: str, algorithm: str, is_draft_worker: bool):
    """The width the (patched or original) code computes: ('value', n) or ('error', type)."""
    tree = ast.parse(source)
    args = _server_args(algorithm)
    spec_algorithm = FakeAlgorithm(algorithm)
    runner = SimpleNamespace(server_args=args, spec_algorithm=spec_algorithm, is_draft_worker=is_draft_worker)
    try:
        if mode == "init":
            line = source[:source.index(anchor_line)].count("\n") + 1
            init = _function(tree, "__init__", line)
            statement = next(s for s in init.body if s.lineno <= line <= s.end_lineno)
            this = SimpleNamespace(model_runner=runner, speculative_num_draft_tokens=BLOCK, is_dllm=False,
                                   num_tokens_per_bs=1)
            names = {"self": this, "model_runner": runner,
                     "ForwardMode": SimpleNamespace(TARGET_VERIFY="tv", DLLM_EXTEND="de", DECODE="d")}
            exec(compile(ast.Module(body=[statement], type_ignores=[]), "<width>", "exec"), names)
            return "value", this.num_tokens_per_bs
        function = _function(tree, mode)
        module = ast.Module(body=[ast.ImportFrom("__future__", [ast.alias("annotations")], 0), function],
                            type_ignores=[])
        names = {"Optional": object, "Literal": object, "get_spec": lambda: args}
        exec(compile(ast.fix_missing_locations(module), "<width>", "exec"), names)
        if mode == "decode_num_tokens_per_bs":
            return "value", names[mode](SimpleNamespace(**vars(runner)))
        extra = {"server_args": args} if "server_args" in [a.arg for a in function.args.kwonlyargs] else {}
        return "value", names[mode](phase="target_verify", spec_algorithm=spec_algorithm,
                                    is_draft_worker=is_draft_worker, **extra)
    except Exception as error:  # the original code's own refusals (e.g. draft worker in 0.5.9)
        return "error", type(error).__name__


@pytest.fixture(scope="module")
def catalog():
    return load_remediations([shipped("remediations")])


@pytest.mark.parametrize("version", list(LAYOUTS))
def test_patch_applies_computes_budget_plus_one_and_reverts(version, tmp_path, catalog):
    site = wheels.fresh_copy(version, tmp_path)
    layout_name, relative, mode = LAYOUTS[version]
    target = site / relative
    original = target.read_bytes()
    engine = Engine(LocalHost(), str(tmp_path / "state"), catalog)
    plan = engine.plan(ID, site_packages=str(site))
    assert plan.applicable, plan.reason
    assert (plan.layout, plan.version) == (layout_name, version)
    assert "+" in plan.diff and "ddtreed:ddtree-verify-graph-width" in plan.diff
    assert target.read_bytes() == original  # planning writes nothing

    application = engine.apply(plan)
    patched = target.read_bytes()
    compile(patched, str(target), "exec")
    anchor = next(layout.anchor for layout in catalog.get(ID).layouts if layout.name == layout_name)
    anchor_line = anchor.splitlines()[0] + "\n"
    for algorithm in ("DDTREE", "DFLASH", "EAGLE"):
        for draft in (False, True):
            before = width(original.decode(), mode, anchor_line, algorithm, draft)
            after = width(patched.decode(), mode, anchor_line, algorithm, draft)
            if algorithm == "DDTREE" and not draft:
                assert before == ("value", BLOCK), before  # the founding bug, in the real code
                assert after == ("value", BUDGET + 1)
            else:
                assert after == before, (algorithm, draft)

    state = inspect_ddtree_width(str(site))
    assert state.patched_by_us and state.fixed and state.layout == layout_name
    again = engine.plan(ID, site_packages=str(site))
    assert not again.applicable and again.already_applied
    assert engine.status()[0].files[0].after_sha256 == application.files[0].after_sha256

    engine.revert(application.application_id)
    assert target.read_bytes() == original
    assert not inspect_ddtree_width(str(site)).patched_by_us


@pytest.mark.parametrize("version", ["0.5.12", "0.5.16", "0.5.23"])
def test_missing_anchor_is_refused_and_nothing_changes(version, tmp_path, catalog):
    site = wheels.fresh_copy(version, tmp_path)
    _, relative, _ = LAYOUTS[version]
    target = site / relative
    # A different build: the anchor's text differs, and RECORD vouches for that text.
    changed = target.read_bytes().replace(b"speculative_num_draft_tokens", b"speculative_num_draft_tokens_x")
    target.write_bytes(changed)
    record = next(site.glob("sglang-*.dist-info")) / "RECORD"
    lines = [re.sub(r",sha256=[^,]+,", f",{record_hash(changed)},", line) if line.startswith(relative + ",")
             else line for line in record.read_text().splitlines()]
    record.write_text("\n".join(lines) + "\n")
    engine = Engine(LocalHost(), str(tmp_path / "state"), catalog)
    plan = engine.plan(ID, site_packages=str(site))
    assert not plan.applicable and "anchor" in plan.reason
    with pytest.raises(ApplyError):
        engine.apply(plan)
    assert target.read_bytes() == changed


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.20"])
def test_locally_modified_file_is_refused(version, tmp_path, catalog):
    site = wheels.fresh_copy(version, tmp_path)
    target = site / LAYOUTS[version][1]
    edited = target.read_bytes() + b"# a local hotfix\n"
    target.write_bytes(edited)
    plan = Engine(LocalHost(), str(tmp_path / "state"), catalog).plan(ID, site_packages=str(site))
    assert not plan.applicable and "locally modified" in plan.reason
    assert target.read_bytes() == edited


@pytest.mark.parametrize("version", list(LAYOUTS))
def test_cli_dry_run_prints_the_diff_and_changes_nothing(version, tmp_path):
    site = wheels.fresh_copy(version, tmp_path)
    target = site / LAYOUTS[version][1]
    original = target.read_bytes()
    done = subprocess.run([sys.executable, "-m", "ddtreed", "remediate", "apply", ID, "--site-packages",
                           str(site), "--dry-run", "--state-dir", str(tmp_path / "state")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"--- a/{LAYOUTS[version][1]}" in done.stdout
    assert "+            return _ddtreed_args.speculative_ddtree_budget + 1" in done.stdout or \
        "speculative_ddtree_budget + 1" in done.stdout
    assert target.read_bytes() == original


def _wheel_accepts(site: Path, flag: str) -> bool:
    """argparse literal in server_args.py, or (0.5.20+) a CLI dataclass field of that name."""
    server_args = (site / "sglang/srt/server_args.py").read_text()
    if re.search(rf"[\"']{re.escape(flag)}[\"']", server_args):
        return True
    field = flag[2:].replace("-", "_")
    for path in (site / "sglang/srt/arg_groups/fields").glob("*.py"):
        match = re.search(rf"\n    {field}: A\[(.*?)\]\s*=", path.read_text(), re.S)
        if match and "no_cli=True" not in match.group(1):
            return True
    return False


@pytest.mark.parametrize("version", list(LAYOUTS))
def test_flag_table_matches_the_wheel(version):
    site = wheels.site_packages(version)
    for logical in ("cuda-graph-max-bs", "cuda-graph-bs", "disable-cuda-graph"):
        for spelling in flags.spellings(logical):
            assert _wheel_accepts(site, spelling.name) == spelling.accepted_by(version), (version, spelling)
