"""The demo's model and installer without processes: speculation is exact, faults are what they say."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

import pytest

from ddtreed.config import load
from ddtreed.demo import prepare
from ddtreed.demo.engine_install import TEMPLATE
from ddtreed.demo.language_model import VOCAB_SIZE, accept, build_tree, chain_tree, target_next


def speculate(root: int, tokens: int, block: int, budget: int | None, **flags) -> tuple[list[int], float]:
    """The workload's decode loop with the target computed in Python."""
    collapse = flags.get("collapse", False)
    output, steps = [root], 0
    while len(output) < tokens:
        tree = (build_tree(output[-1], block, budget, collapse) if budget is not None
                else chain_tree(output[-1], block, collapse))
        predictions = [target_next(t) for t in tree.tokens]
        output += accept(tree, predictions, verify=flags.get("verify", True))
        steps += 1
    return output[:tokens], (len(output) - 1) / steps


def greedy(root: int, tokens: int) -> list[int]:
    output = [root]
    while len(output) < tokens:
        output.append(target_next(output[-1]))
    return output


@pytest.mark.parametrize("budget", [1, 3, 7, 8, 15, 32, 40])
def test_ddtree_reproduces_the_target_at_every_budget(budget):
    for root in range(VOCAB_SIZE):
        tree = build_tree(root, 8, budget)
        assert len(tree.tokens) == budget + 1  # what the verify graph must be wide enough for
        assert all(0 <= parent < index for index, parent in enumerate(tree.parents) if index)
        assert speculate(root, 40, 8, budget)[0] == greedy(root, 40)


def test_a_bigger_tree_accepts_more_and_dflash_matches_the_target():
    small, large = speculate(5, 200, 8, 7)[1], speculate(5, 200, 8, 32)[1]
    assert 1 < small < large
    assert speculate(5, 100, 8, None)[0] == greedy(5, 100)


def test_collapse_keeps_output_right_and_acceptance_at_one():
    output, accept_length = speculate(9, 50, 8, 32, collapse=True)
    assert output == greedy(9, 50) and accept_length == 1.0


def test_skipped_verification_is_silent_corruption():
    output, _ = speculate(9, 50, 8, 32, verify=False)
    assert len(output) == 50 and output != greedy(9, 50)


def test_prepare_installs_an_unpatched_engine_with_a_valid_record(tmp_path: Path):
    config = load(prepare(tmp_path, port=31234, tp=8, budget=32, block_size=8))
    site = Path(config.service.site_packages)
    runner = site / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    assert runner.read_bytes() == (TEMPLATE / "cuda_graph_runner.py").read_bytes()
    assert ("    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
            "    return num_tokens_per_bs\n") in runner.read_text()
    record = (site / "ddtreed_demo_engine-0.1.0.dist-info" / "RECORD").read_text().splitlines()
    checked = 0
    for row in record:
        path, digest, size = row.rsplit(",", 2)
        if not digest:
            assert path.endswith("RECORD")
            continue
        data = (site / path).read_bytes()
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(data)
        checked += 1
    assert checked >= 3
    argv = list(config.service.argv)
    assert argv[:3] == [sys.executable, "-m", "ddtreed.demo.server"]
    for flag, value in (("--tp-size", "8"), ("--speculative-ddtree-budget", "32"),
                        ("--speculative-num-draft-tokens", "8"), ("--port", "31234")):
        assert argv[argv.index(flag) + 1] == value
    assert config.service.env["PYTHONPATH"].split(":")[0] == str(site)
    assert config.paths.log_dir.startswith(str(tmp_path)) and config.policy.stop_grace_s <= 5


def test_prepare_again_reverts_a_patched_engine(tmp_path: Path):
    config = load(prepare(tmp_path))
    runner = Path(config.service.site_packages) / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    runner.write_text("patched\n")
    prepare(tmp_path)
    assert runner.read_bytes() == (TEMPLATE / "cuda_graph_runner.py").read_bytes()


def test_the_daemon_side_never_imports_torch():
    import subprocess

    code = ("import sys, ddtreed.demo, ddtreed.demo.server, ddtreed.service.launch, ddtreed.health.probes, "
            "ddtreed.restart, ddtreed.service.host; sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
