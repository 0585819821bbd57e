"""Each preflight check: a config that trips it and one that does not, against real files."""

from __future__ import annotations

import json
import shlex
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from ddtreed.config import from_mapping
from ddtreed.context import service_context
from ddtreed.service.host import LocalHost
from ddtreed.preflight import CHECKS, run_preflight, would_crash

LAUNCH = "python -m sglang.launch_server --model-path m "


class NoGpuHost(LocalHost):
    """The real local host with an empty GPU (this box has no NVML)."""

    def gpu_holders(self, pids=None):
        return []


class BusyGpuHost(NoGpuHost):
    def gpu_holders(self, pids=None):
        return [4242, 4243]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def site_packages(root: Path, version: str) -> Path:
    site = root / f"site-{version}"
    (site / "sglang").mkdir(parents=True)
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\n")
    return site


def setup(tmp_path, command: str, version: str | None = None, block_on=(), port=None):
    """Config + context for `command` with a real site-packages of `version` and a free port."""
    port = port or free_port()
    argv = shlex.split(command) + ["--port", str(port)]
    service = {"argv": argv}
    if version:
        service["site_packages"] = str(site_packages(tmp_path, version))
    config = from_mapping({"service": service, "preflight": {"block_on": list(block_on)},
                           "paths": {"state_dir": str(tmp_path / "state")}})
    return config, service_context(config, NoGpuHost())


def findings_of(tmp_path, command, check, version=None, host=None, **kwargs):
    config, context = setup(tmp_path, command, version, **kwargs)
    found = run_preflight(config, context, host or NoGpuHost(), checks={check: CHECKS[check]})
    return [f for f in found if f.check == check]


# --- unsupported flags ---------------------------------------------------------------------

def test_cuda_graph_max_bs_on_0_5_20_would_crash(tmp_path):
    [finding] = findings_of(tmp_path, LAUNCH + "--cuda-graph-max-bs 32", "unsupported-flags", "0.5.20")
    assert finding.severity == "would-crash"
    assert "--cuda-graph-max-bs" in finding.why and "0.5.20" in finding.why
    assert "--cuda-graph-max-bs-decode" in finding.advice
    assert finding.signature == "preflight:unsupported-flags"


def test_decode_flag_on_0_5_13_would_crash(tmp_path):
    [finding] = findings_of(tmp_path, LAUNCH + "--cuda_graph_max_bs_decode=16", "unsupported-flags",
                            "0.5.13")
    assert finding.params["flag"] == "--cuda-graph-max-bs-decode"
    assert "--cuda-graph-max-bs" in finding.advice


@pytest.mark.parametrize("flag, version", [("--cuda-graph-max-bs 32", "0.5.19"),
                                           ("--cuda-graph-max-bs-decode 32", "0.5.20")])
def test_accepted_flags_are_quiet(tmp_path, flag, version):
    assert findings_of(tmp_path, LAUNCH + flag, "unsupported-flags", version) == []


def test_unknown_version_is_reported_as_skipped_not_as_clean(tmp_path):
    [skipped] = findings_of(tmp_path, LAUNCH + "--cuda-graph-max-bs 32", "unsupported-flags", None)
    assert skipped.kind == "skipped" and "version is unknown" in skipped.why
    assert would_crash([skipped]) == [] and not skipped.blocking


# --- DDTree settings -----------------------------------------------------------------------

DDTREE = LAUNCH + "--speculative-algorithm DDTREE --speculative-draft-model-path d " \
                  "--speculative-num-draft-tokens 8 "


@pytest.mark.parametrize("extra, setting", [
    ("--speculative-ddtree-budget 7 --page-size 16", "page size"),
    ("--speculative-ddtree-budget 32 --page-size 1 --attention-backend fa3", "full-tree backend"),
    ("--speculative-ddtree-budget 32 --page-size 1", "full-tree backend"),
    ("--speculative-ddtree-budget 0", "budget"),
    ("--speculative-ddtree-budget 7 --speculative-use-rejection-sampling", "rejection sampling"),
])
def test_ddtree_refused_settings(tmp_path, extra, setting):
    found = findings_of(tmp_path, DDTREE + extra, "ddtree-settings")
    assert [f.params["setting"] for f in found] == [setting]
    assert found[0].severity == "would-crash"


def test_full_tree_numbers_in_the_reason(tmp_path):
    [finding] = findings_of(tmp_path, DDTREE + "--speculative-ddtree-budget 32 --attention-backend fa3",
                            "ddtree-settings")
    assert "budget 32 > block size 8 - 1 = 7" in finding.why and "fa3" in finding.why


@pytest.mark.parametrize("extra", [
    "--speculative-ddtree-budget 32 --page-size 1 --attention-backend triton",  # the founding shape
    "--speculative-ddtree-budget 7 --page-size 1",  # not a full tree: any backend
    "--page-size 1",  # default budget = block size - 1
])
def test_ddtree_accepted_settings(tmp_path, extra):
    assert findings_of(tmp_path, DDTREE + extra, "ddtree-settings") == []


def test_ddtree_settings_ignore_other_algorithms(tmp_path):
    assert findings_of(tmp_path, LAUNCH + "--speculative-algorithm DFLASH --page-size 64",
                       "ddtree-settings") == []


# --- DFlash block size ---------------------------------------------------------------------

def draft_dir(tmp_path, config) -> str:
    path = tmp_path / "draft"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_block_size_flags_that_disagree_would_crash(tmp_path):
    [finding] = findings_of(tmp_path, LAUNCH + "--speculative-algorithm DFLASH "
                            "--speculative-num-draft-tokens 8 --speculative-dflash-block-size 16",
                            "dflash-block-size")
    assert finding.severity == "would-crash"
    assert "--speculative-dflash-block-size 16" in finding.why
    assert "--speculative-num-draft-tokens 8" in finding.why


def test_flag_differs_from_draft_config_is_a_warning(tmp_path):
    draft = draft_dir(tmp_path, {"dflash_config": {"block_size": 16}})
    [finding] = findings_of(tmp_path, LAUNCH + f"--speculative-algorithm DFLASH "
                            f"--speculative-draft-model-path {draft} --speculative-num-draft-tokens 8",
                            "dflash-block-size")
    assert finding.severity == "warning"
    assert finding.params == {"block_size": 8, "draft_config_block_size": 16}


@pytest.mark.parametrize("extra", ["--speculative-num-draft-tokens 16",
                                   "--speculative-dflash-block-size 16 --speculative-num-draft-tokens 16",
                                   ""])
def test_block_size_agreeing_with_draft_config(tmp_path, extra):
    draft = draft_dir(tmp_path, {"block_size": 16})
    command = LAUNCH + f"--speculative-algorithm DFLASH --speculative-draft-model-path {draft} {extra}"
    assert findings_of(tmp_path, command, "dflash-block-size") == []


# --- CUDA-graph batch size -----------------------------------------------------------------

DFLASH = LAUNCH + "--speculative-algorithm DFLASH --speculative-draft-model-path d " \
                  "--speculative-num-draft-tokens 8 "


def test_default_48_requests_above_captured_16(tmp_path):
    [finding] = findings_of(tmp_path, DFLASH + "--cuda-graph-max-bs 16", "cuda-graph-batch")
    assert finding.severity == "would-crash"
    assert finding.params == {"max_running_requests": 48, "cuda_graph_max_bs": 16}
    assert "DFlash default" in finding.why
    assert finding.remediations == ()  # halving 48 -> 24 would still overflow 16
    assert "--max-running-requests 16" in finding.advice


def test_halving_remediation_offered_when_it_fits(tmp_path):
    [finding] = findings_of(tmp_path, DFLASH + "--cuda-graph-bs 1 2 4 8 16 32 --max-running-requests 64",
                            "cuda-graph-batch")
    assert finding.params == {"max_running_requests": 64, "cuda_graph_max_bs": 32}
    assert finding.remediations == ("lower-max-running-requests",)


@pytest.mark.parametrize("extra", ["--cuda-graph-max-bs 48", "--cuda-graph-max-bs 16 --max-running-requests 16",
                                   "", "--cuda-graph-max-bs 8 --disable-cuda-graph"])
def test_captured_batch_size_covers_running_requests(tmp_path, extra):
    assert findings_of(tmp_path, DFLASH + extra, "cuda-graph-batch") == []


# --- port, GPUs ----------------------------------------------------------------------------

def test_port_taken(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        [finding] = findings_of(tmp_path, LAUNCH, "port-in-use", port=port)
    assert finding.severity == "would-crash" and finding.category == "port-in-use"
    assert str(port) in finding.why


def test_port_free(tmp_path):
    assert findings_of(tmp_path, LAUNCH, "port-in-use") == []


def test_gpus_held(tmp_path):
    [finding] = findings_of(tmp_path, LAUNCH, "gpus-held", host=BusyGpuHost())
    assert finding.severity == "warning" and finding.params["pids"] == [4242, 4243]
    assert findings_of(tmp_path, LAUNCH, "gpus-held", host=NoGpuHost()) == []


# --- the runner ----------------------------------------------------------------------------

def broken_check(inputs):
    raise KeyError("no such thing")


def test_a_broken_check_is_reported_and_never_blocks(tmp_path):
    config, context = setup(tmp_path, DDTREE + "--page-size 4", block_on=["would-crash", "broken"])
    checks = {"broken": broken_check, "ddtree-settings": CHECKS["ddtree-settings"]}
    error, refusal = run_preflight(config, context, NoGpuHost(), checks=checks)
    assert (error.kind, error.check, error.blocking) == ("check-error", "broken", False)
    assert "KeyError" in error.why
    assert refusal.blocking  # the other check still ran, and `would-crash` blocks it
    assert would_crash([error, refusal]) == [refusal]


def test_block_on_names_checks(tmp_path):
    config, context = setup(tmp_path, DDTREE + "--page-size 4", block_on=["port-in-use"])
    [finding] = run_preflight(config, context, NoGpuHost(), checks={"ddtree-settings": CHECKS["ddtree-settings"]})
    assert not finding.blocking
    config, context = setup(tmp_path, DDTREE + "--page-size 4", block_on=["ddtree-settings"])
    [finding] = run_preflight(config, context, NoGpuHost(), checks={"ddtree-settings": CHECKS["ddtree-settings"]})
    assert finding.blocking


def test_disabled_preflight_runs_only_when_forced(tmp_path):
    config, context = setup(tmp_path, DDTREE + "--page-size 4")
    config = replace(config, preflight=replace(config.preflight, enabled=False))
    assert run_preflight(config, context, NoGpuHost()) == []
    assert run_preflight(config, context, NoGpuHost(), force=True)


class Plan:
    def __init__(self, applicable, reason=""):
        self.applicable, self.reason = applicable, reason


class Engine:
    """Plans like the remediation engine: only the ids it knows apply."""

    def __init__(self, applicable):
        self.applicable = applicable

    def plan(self, remediation_id, context):
        return Plan(remediation_id in self.applicable, "anchor not found")


def test_engine_drops_remediations_that_cannot_apply(tmp_path):
    config, context = setup(tmp_path, DFLASH + "--cuda-graph-max-bs 32 --max-running-requests 64")
    checks = {"cuda-graph-batch": CHECKS["cuda-graph-batch"]}
    [kept] = run_preflight(config, context, NoGpuHost(), engine=Engine({"lower-max-running-requests"}),
                           checks=checks)
    assert kept.remediations == ("lower-max-running-requests",)
    [dropped] = run_preflight(config, context, NoGpuHost(), engine=Engine(set()), checks=checks)
    assert dropped.remediations == ()
    assert dropped.remediation_notes == ("lower-max-running-requests: not applicable: anchor not found",)


def test_every_check_runs_on_a_full_ddtree_launch(tmp_path):
    config, context = setup(tmp_path, DDTREE + "--speculative-ddtree-budget 32 --page-size 1 "
                            "--attention-backend triton", version="0.5.13")
    found = run_preflight(config, context, NoGpuHost())
    assert not [f for f in found if f.kind != "finding"], [f.render() for f in found]
