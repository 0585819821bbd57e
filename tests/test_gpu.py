"""GPU proofs: real torch.cuda.CUDAGraph capture/replay under the real daemon. Skipped without CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

REPO = Path(__file__).resolve().parent.parent


def test_a_graph_captured_8_wide_rejects_a_33_token_ddtree_batch_with_torchs_own_error():
    static = torch.zeros(8, dtype=torch.long, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        static.add_(1)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        static.add_(1)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(8\) must match the size of tensor b \(33\)"):
        static[:33].copy_(torch.arange(33, device="cuda"))


def _demo(tmp_path: Path, *options: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "ddtreed", "demo", "--device", "cuda", "--json",
         "--state-dir", str(tmp_path / "demo"), *options],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )
    assert done.stdout, done.stderr[-3000:]
    return {"rc": done.returncode, **json.loads(done.stdout.strip().splitlines()[-1])}


def test_founding_loop_closes_with_a_real_cuda_graph(tmp_path):
    report = _demo(tmp_path)
    assert report["rc"] == 0 and report["ok"]
    incident = report["incidents"][0]
    assert incident["status"] == "resolved"
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["remediation_id"] == "ddtree-verify-graph-width"
    service_log = (tmp_path / "demo" / "logs" / "service.stderr.log").read_text()
    assert "cuda graph: True" in service_log  # the verify graph was a real CUDA graph


def test_device_side_assert_in_a_replayed_graph_is_diagnosed(tmp_path):
    report = _demo(tmp_path, "--fault", "device-assert")
    incident = report["incidents"][-1]
    assert incident["category"] == "illegal-memory-access", incident
    assert incident["rule_id"] == "device-side-assert"
    assert report["rc"] == 0


def test_out_of_memory_at_capture_is_diagnosed_and_fixed_by_a_smaller_capture(tmp_path):
    report = _demo(tmp_path, "--fault", "oom-at-capture")
    incident = report["incidents"][-1]
    assert incident["category"] == "cuda-oom", incident
    assert incident["remediation_id"] == "lower-cuda-graph-max-bs"
    assert incident["status"] == "resolved"
