"""`encode._plain` returns scalars, dicts and lists before its dataclass and ABC checks: the JSON the
store writes is byte for byte what the general walk wrote (a reference copy of it below), on the
crash records of the founding log, the real 0.5.16 logs and mixed nested values."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ddtreed.incidents import encode
from ddtreed.records import ServiceContext
from ddtreed.tracebacks import assemble_lines

HERE = Path(__file__).resolve().parent


def reference(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: reference(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): reference(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [reference(item) for item in value]
    return value


def crash_groups():
    logs = sorted((HERE / "fixtures" / "sglang-0.5.16").glob("*.log"))
    logs += sorted((HERE / "corpus" / "logs").glob("*.log"))
    for path in logs:
        yield from assemble_lines(path.read_text(encoding="utf-8", errors="replace").splitlines(), path.name)


def test_crash_records_encode_as_before():
    groups = list(crash_groups())
    assert len(groups) >= 5
    for group in groups:
        records = encode.crash_records(group)
        assert json.dumps(encode._plain(records), sort_keys=True) == json.dumps(reference(records), sort_keys=True)


@dataclasses.dataclass
class Inner:
    name: str
    values: tuple = (1, 2.5, None, True)


def test_nested_values_of_every_kind_encode_as_before():
    value = {"context": ServiceContext(speculative_algorithm="DDTREE", tp_size=2), 3: [Inner("a"), (Inner("b", ()),)],
             "ordered": OrderedDict(b=1, a=[{"x": frozenset({1})}]), "proxy": MappingProxyType({"k": "v"}),
             "set": {4}, "flag": False, "none": None}
    assert json.dumps(encode._plain(value), sort_keys=True) == json.dumps(reference(value), sort_keys=True)
    assert encode._plain(value) == reference(value)
