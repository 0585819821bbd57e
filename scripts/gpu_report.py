"""Summarise a scripts/gpu-e2e.sh output folder as one JSON object (the figures of docs/gpu-e2e.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def step_times(incident: dict) -> dict[str, float]:
    """First time of each step, in epoch seconds (ISO strings in the demo's JSON)."""
    from datetime import datetime

    times: dict[str, float] = {}
    for step in incident.get("steps", []):
        at = step["at"]
        seconds = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() if isinstance(at, str) else at
        times.setdefault(step["step"], seconds)
    return times


def durations(incident: dict) -> dict[str, float | None]:
    times = step_times(incident)

    def between(first: str, second: str) -> float | None:
        if first in times and second in times:
            return round(times[second] - times[first], 3)
        return None

    return {
        "crash_to_diagnosis_s": between("detected", "diagnosed"),
        "diagnosis_to_patched_s": between("diagnosed", "applied"),
        "relaunch_to_healthy_s": between("restarted", "healthy"),
        "detected_to_verified_s": between("detected", "verified"),
    }


def case(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return {"ok": False, "error": f"{path.name}: {error}"}
    incidents = report.get("incidents", [])
    return {
        "ok": report.get("ok"),
        "incidents": [
            {"id": item["id"], "status": item["status"], "category": item["category"],
             "rule_id": item["rule_id"], "remediation_id": item.get("remediation_id"),
             "tried": [(app["remediation_id"], app["status"]) for app in item.get("applications", [])],
             **durations(item)}
            for item in incidents
        ],
    }


def main() -> int:
    out_dir = Path(sys.argv[1])
    summary = {name: case(out_dir / f"{name}.json")
               for name in ("founding", "preflight", "device-assert", "oom-at-capture")}
    detection = out_dir / "detection.json"
    if detection.exists():
        try:
            summary["detection"] = json.loads(detection.read_text())
        except ValueError:
            summary["detection"] = {"error": "unreadable"}
    assert_log = out_dir / "device-assert.service.log"
    if assert_log.exists():
        lines = assert_log.read_text(errors="replace").splitlines()
        summary["device_assert_flood_lines"] = sum("Assertion" in line and "failed" in line for line in lines)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
