"""Family rules: the same failure in other words lands in the same category (issue 15's list of
phrasings), and a specific rule still outranks its family."""

import pytest

from ddtreed.paths import shipped
from ddtreed.records import Crash, Frame, ServiceContext
from ddtreed.rules import load_rules

RULES = load_rules([shipped("rules")])
SITE = "/x/site-packages/"


def crash(exception, message, *frames, context=()):
    return Crash(kind="traceback", exception=exception, message=message, context=context,
                 frames=tuple(Frame(f"{SITE}{path}", 1, function) for path, function in
                              (frame.split(":") for frame in frames)))


CAPTURE = ("sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture")
REPLAY = ("sglang/srt/model_executor/cuda_graph_runner.py:replay",)


@pytest.mark.parametrize("exception, message, frames, category", [
    ("RuntimeError", "The expanded size of the tensor (16) must match the existing size (17) at non-singleton dimension 1.", CAPTURE, "cuda-graph-shape-mismatch"),
    ("RuntimeError", "shape '[8, -1, 128]' is invalid for input of size 1000", REPLAY, "cuda-graph-shape-mismatch"),
    ("ValueError", "operands could not be broadcast together with shapes (4,16) (4,17)", CAPTURE, "cuda-graph-shape-mismatch"),
    ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (4x16 and 17x32)", ("sglang/srt/layers/linear.py:forward",), "other"),
    ("RuntimeError", "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4312", (), "nccl-error"),
    ("torch.distributed.DistNetworkError", "Failed to recv, got 0 bytes. Connection was likely closed.", (), "nccl-error"),
    ("RuntimeError", "DeepEP error: CPU recv timeout", (), "nccl-error"),
    ("RuntimeError", "nvshmem detected an error: nvshmemi_transport_init failed", (), "nccl-error"),
    ("RuntimeError", "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.", (), "nccl-error"),
    ("RuntimeError", "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'", (), "kernel-compile-error"),
    ("RuntimeError", "No such operator sgl_kernel::fp8_blockwise_scaled_mm", (), "kernel-compile-error"),
    ("RuntimeError", "HIP error: invalid device function", (), "kernel-compile-error"),
    ("triton.compiler.errors.CompilationError", "at 12:4: def _fwd_kernel(...)", (), "kernel-compile-error"),
    ("RuntimeError", "HIP error: out of memory", (), "cuda-oom"),
    ("torch._dynamo.exc.BackendCompilerFailed", "backend='inductor' raised: AssertionError: bad graph", CAPTURE, "cuda-graph-capture-failed"),
    ("Exception", "Capture cuda graph failed: ", CAPTURE, "cuda-graph-capture-failed"),
    ("ModuleNotFoundError", "No module named 'sgl_kernel'", ("sglang/srt/server_args.py:__post_init__",), "missing-dependency"),
    ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.", ("sglang/srt/model_loader/loader.py:load_model",), "cuda-oom"),
    ("RuntimeError", "CUDA error: uncorrectable ECC error encountered", (), "gpu-hardware-fault"),
])
def test_phrasings_land_in_their_category(exception, message, frames, category):
    diagnosis = RULES.diagnose((crash(exception, message, *frames),))
    assert diagnosis.match.category == category, (diagnosis.match.rule_id, diagnosis.match.diagnosis)
    assert diagnosis.confidence > 0


def test_the_founding_rule_outranks_every_family():
    founding = crash("RuntimeError", "The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0",
                     *REPLAY, "sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare")
    context = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32)
    diagnosis = RULES.diagnose((founding,), context)
    assert diagnosis.match.rule_id == "ddtree-verify-graph-width"
    assert diagnosis.confidence >= 0.9
    assert [item.family for item in diagnosis.deciding] == ["graph-replay", "shape-mismatch"]


def test_a_server_args_frame_does_not_outvote_an_oom_message():
    oom = crash("RuntimeError", "CUDA error: out of memory",
                "sglang/srt/server_args.py:__post_init__")
    diagnosis = RULES.diagnose((oom,))
    assert diagnosis.match.category == "cuda-oom"
    assert "unsupported-config" in {rival.category for rival in diagnosis.outvoted}


def test_family_match_keys_are_validated(tmp_path):
    from ddtreed.rules import RuleError

    (tmp_path / "r.toml").write_text('[[rule]]\nid = "x"\ncategory = "other"\ntitle = "t"\nmeaning = "m"\n'
                                     'diagnosis = "d"\n[rule.match]\nmessage_family = ["no-such-family"]\n')
    with pytest.raises(RuleError) as error:
        load_rules([tmp_path])
    assert "r.toml:8: match.message_family: unknown message family 'no-such-family'" in str(error.value)
