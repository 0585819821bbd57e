"""The demo service for real: the founding crash on every rank, and a patched engine that serves."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from ddtreed.config import load
from ddtreed.demo import prepare
from ddtreed.demo.language_model import encode, decode, target_next
from ddtreed.health.probes import MilestoneTracker, Prober
from ddtreed.service.host import LocalHost, port_in_use
from ddtreed.service.launch import Supervisor
from ddtreed.records import ExitStatus
from supervision_helpers import wait_for

pytestmark = pytest.mark.slow

FOUNDING = ("RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at "
            "non-singleton dimension 0")
ANCHOR = ("    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
          "    return num_tokens_per_bs\n")
WIDTH_FIX = ("    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
             "    if server_args.speculative_algorithm == \"DDTREE\":\n"
             "        num_tokens_per_bs = server_args.speculative_ddtree_budget + 1\n"
             "    return num_tokens_per_bs\n")
PROMPT = "The capital of France is"


class RunningDemo:
    """A demo service under a real Supervisor, its log followed until ready."""

    def __init__(self, demo_dir: Path, patch: bool, **options):
        self.config = load(prepare(demo_dir, load_seconds=0.3, tp=2, device="cpu", **options))
        if patch:
            runner = Path(self.config.service.site_packages) / "ddtreed_demo_engine" / "cuda_graph_runner.py"
            runner.write_text(runner.read_text().replace(ANCHOR, WIDTH_FIX))
        self.host = LocalHost()
        self.supervisor = Supervisor(self.host, self.config, list(self.config.service.argv),
                                     self.config.service.env)
        self.prober = Prober(self.host.http_base_url("127.0.0.1", self.config.service.port))
        self.tracker = MilestoneTracker()
        self.lines: list[str] = []
        self.supervisor.start()
        self.follower = self.host.open_follower(self.supervisor.log_paths)
        # a deadline for a hang, not a speed claim: a loaded 2-core box takes 45 s for a 0.3 s load
        self.follow(lambda: self.tracker.ready, 180, "the ready line")

    def follow(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for chunk in self.follower.read():
                self.tracker.feed(chunk)
                self.lines.extend(chunk.lines)
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout}s; log tail: {self.lines[-20:]}")
            self.follower.wait(0.1)

    def stop(self) -> ExitStatus:
        try:
            return self.supervisor.stop("test done")
        finally:
            self.follower.close()


def greedy(prompt: str, tokens: int) -> str:
    ids, last = [], encode(prompt)[-1]
    for _ in range(tokens):
        last = target_next(last)
        ids.append(last)
    return " " + decode(ids)


@pytest.fixture(scope="module")
def patched_demo(tmp_path_factory):
    demo = RunningDemo(tmp_path_factory.mktemp("patched"), patch=True)
    yield demo
    demo.stop()


def test_startup_milestones_in_order(patched_demo):
    names = [m.name for m in patched_demo.tracker.milestones]
    assert names == ["weights-loading", "weights-loaded", "kv-cache", "memory-pool",
                     "graph-capture", "graphs-captured", "max-total-tokens", "ready"]
    assert patched_demo.tracker.progress_text() == "ready"
    assert any("num_tokens_per_req=33" in line for line in patched_demo.lines)


def test_patched_width_serves_the_greedy_output_with_speculation(patched_demo):
    prober = patched_demo.prober
    assert prober.health(prober.deadline_in(10)).ok
    result = prober.generate(PROMPT, 64, prober.deadline_in(30))
    assert result.ok and result.completion_tokens == 64
    assert result.output_text == greedy(PROMPT, 64)  # speculation reproduces the target exactly
    assert result.accept_length is not None and result.accept_length > 3
    patched_demo.follow(lambda: any("accept len:" in line for line in patched_demo.lines), 10,
                        "a Decode batch line")


def test_server_info_names_the_config_and_the_acceptance(patched_demo):
    prober = patched_demo.prober
    prober.generate(PROMPT, 16, prober.deadline_in(30))
    info = prober.server_info(prober.deadline_in(10))
    assert info["speculative_algorithm"] == "DDTREE" and info["speculative_ddtree_budget"] == 32
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1


def test_ranks_are_named_like_sglang_schedulers_in_the_service_session(patched_demo):
    pid = patched_demo.supervisor.pid
    ranks = psutil.Process(pid).children()
    assert sorted(p.name() for p in ranks) == ["sglang::schedul"] * 2  # comm: 15 bytes
    assert {p.pid for p in ranks} <= set(patched_demo.host.session_pids(pid))


def test_first_ddtree_request_crashes_every_rank_and_the_tree(tmp_path: Path):
    demo = RunningDemo(tmp_path / "demo", patch=False)
    try:
        prober = demo.prober
        assert prober.health(prober.deadline_in(10)).ok  # a 1-token probe never reaches the verify graph
        ranks = [p.pid for p in psutil.Process(demo.supervisor.pid).children()]
        result = prober.generate(PROMPT, 16, prober.deadline_in(30))
        assert not result.ok
        status = wait_exit(demo.supervisor, 20)
        demo.follow(lambda: any("SIGQUIT received" in line for line in demo.lines), 5, "SIGQUIT")
        log = "\n".join(demo.lines)
        assert status == ExitStatus(code=None, signal=9)  # SGLang's launcher SIGKILLs itself
        assert log.count(FOUNDING) == 2
        for rank in ("TP0", "TP1"):
            assert f" {rank}] Scheduler hit an exception: Traceback (most recent call last):" in log
        assert "self.input_ids[: self.raw_num_token].copy_(input_ids)" in log
        # the launcher's own SIGKILL of its tree: on a loaded box the ranks take a moment to go
        wait_for(lambda: not demo.host.session_pids(demo.supervisor.pid), 30, what="the ranks gone")
        assert not [pid for pid in ranks if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    finally:
        stopped = demo.stop()
    assert stopped.signal == 9 and not port_in_use("127.0.0.1", demo.config.service.port)


def test_garbage_above_budget_answers_healthy_but_wrong(tmp_path: Path):
    demo = RunningDemo(tmp_path / "demo", patch=True, garbage_above_budget=8)
    try:
        result = demo.prober.generate(PROMPT, 32, demo.prober.deadline_in(30))
        assert result.ok and result.completion_tokens == 32
        assert result.output_text != greedy(PROMPT, 32)  # silent corruption: no crash, wrong text
    finally:
        assert demo.stop() == ExitStatus(code=None, signal=9)  # real 0.5.16: rc 137 after the drain


def wait_exit(supervisor: Supervisor, timeout: float) -> ExitStatus:
    deadline = time.monotonic() + timeout
    while (status := supervisor.poll()) is None:
        assert time.monotonic() < deadline, "the service did not die"
        time.sleep(0.05)
    return status
