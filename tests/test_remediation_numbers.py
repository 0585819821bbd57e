"""The launch edits of the shipped remediations on the values real SGLang launches carry.

Real 0.5.16 on the H200 (run r6): `--mem-fraction-static 1e-05` crashed with the KV-pool error;
`raise-mem-fraction-static` (+0.05) relaunched with `--mem-fraction-static 0`, because the value
was taken for an integer (no "."), and the fix "did not hold"."""

from __future__ import annotations

import pytest

from ddtreed.loop.wiring import catalog_for
from ddtreed.records import ServiceContext
from ddtreed.remediation.argv_edit import value_of
from ddtreed.remediation.launchplan import NotApplicable, plan_argv

BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "30000"]


def planned(remediation_id: str, *flags: str) -> str | None:
    argv = plan_argv(catalog_for(None).get(remediation_id), ServiceContext(argv=tuple(BASE + list(flags))))
    return value_of(list(argv), ("--mem-fraction-static",))[1]


@pytest.mark.parametrize("written, raised", [
    ("1e-05", "0.05"), ("1E-5", "0.05"), ("0.7", "0.75"), ("0.90", "0.95"), (".5", "0.55"),
    ("5e-1", "0.55"), ("0.93", "0.95"),
])
def test_raise_mem_fraction_static_adds_to_the_value_as_written(written, raised):
    assert planned("raise-mem-fraction-static", "--mem-fraction-static", written) == raised


def test_raise_mem_fraction_static_when_absent_steps_from_the_assumed_default():
    assert planned("raise-mem-fraction-static") == "0.9"  # when_absent 0.85, + 0.05


def test_at_the_ceiling_it_is_not_applicable_and_says_so():
    with pytest.raises(NotApplicable, match="ceiling"):
        planned("raise-mem-fraction-static", "--mem-fraction-static", "0.95")


def test_an_integer_flag_stays_an_integer():
    argv = plan_argv(catalog_for(None).get("lower-max-running-requests"),
                     ServiceContext(argv=tuple(BASE + ["--max-running-requests", "48"])))
    assert value_of(list(argv), ("--max-running-requests",))[1] == "24"
