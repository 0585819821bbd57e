"""What the daemon's process loads (issue 19: RSS ≤ 40 MB): the /metrics exposition and the webhook
client are imported only by a daemon configured to use them (their deliveries and scrapes are
tested in test_notify*.py and test_metrics.py); `ddtreed run` maps neither OpenSSL nor asyncio
(ddtreed/lean.py), and what it hashes and logs is the same without them; its incident store is
the standard library's sqlite3 (ddtreed/incidents/lite.py), without sqlite-utils and its click,
dateutil and pluggy (test_incidents_lite.py: the same files)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("prometheus_client", "urllib.request", "http.client", "http.server", "email")
LEFT_OUT = ("_hashlib", "ssl", "_ssl", "asyncio", "_asyncio", "sqlite_utils", "click", "dateutil", "pluggy",
            "statistics", "decimal")
LEAN = "from ddtreed.lean import lean_daemon_process\nlean_daemon_process()\n"
DAEMON_MODULES = "import ddtreed.cli.run_cmd, ddtreed.loop.daemon, ddtreed.ops.logsetup, ddtreed.ops.notify\n"


def run_python(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return out.stdout.splitlines()


def loaded_after(code: str) -> set[str]:
    lines = run_python(code + "\nimport sys, json\n"
                       "print(json.dumps(sorted(name for name, module in sys.modules.items() if module is not None)))")
    return set(json.loads(lines[-1]))


def test_the_daemon_modules_leave_metrics_and_webhooks_unloaded():
    loaded = loaded_after(DAEMON_MODULES)
    assert "ddtreed.loop.daemon" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_a_lean_process_imports_the_daemon_without_openssl_or_asyncio():
    loaded = loaded_after(LEAN + DAEMON_MODULES + "from ddtreed.ops.logsetup import configure\n"
                          "configure(json_output=True)\nimport structlog\nstructlog.get_logger('t').info('x')")
    assert {"ddtreed.loop.daemon", "structlog", "hashlib", "sqlite3", "ddtreed.incidents.lite"} <= loaded
    assert loaded.isdisjoint(LEFT_OUT), sorted(loaded & set(LEFT_OUT))


def test_the_running_daemon_maps_neither_libcrypto_nor_asyncio(tmp_path):
    """The real `ddtreed run` (python -m ddtreed), serving after it fixed the founding crash."""
    config = fast_service.write_config(tmp_path, port=free_port())
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_resolved"), 120, what="the founding incident to resolve")
        maps = Path(f"/proc/{daemon.pid}/maps").read_text()
    finally:
        assert daemon.stop() == 0
    mapped = {line.split()[-1].rsplit("/", 1)[-1] for line in maps.splitlines() if ".so" in line}
    assert not [name for name in mapped if name.startswith(("libcrypto", "libssl", "_hashlib", "_ssl", "_asyncio"))], \
        sorted(mapped)


def test_digests_without_openssl_are_the_same():
    """Signatures and content hashes are stored and compared across daemon lives and versions."""
    data = "RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0"
    lines = run_python(LEAN + "import sys, hashlib\nassert sys.modules['_hashlib'] is None\n"
                       f"print(hashlib.sha256({data!r}.encode()).hexdigest())\n"
                       "from ddtreed.service.host import sha256_bytes\n"
                       f"print(sha256_bytes({data!r}.encode()))\n")
    expected = hashlib.sha256(data.encode()).hexdigest()
    assert lines == [expected, expected]


def test_asyncio_is_the_real_one_for_whoever_uses_it_after_a_lean_start():
    """structlog's async methods and any later `import asyncio` get the real module."""
    lines = run_python(LEAN + "import sys\nimport structlog\nassert 'asyncio' not in sys.modules\n"
                       "from ddtreed.ops.logsetup import configure\nconfigure(json_output=True)\n"
                       "import asyncio\nprint(type(asyncio).__name__, sys.modules['asyncio'] is asyncio)\n"
                       "asyncio.run(structlog.get_logger('t').ainfo('from_a_coroutine'))\n"
                       "import asyncio.subprocess\nprint(asyncio.subprocess.PIPE == -1)\n")
    assert lines[0] == "module True"
    assert json.loads(lines[1][lines[1].index("{"):])["event"] == "from_a_coroutine"
    assert lines[2] == "True"


def test_a_daemon_without_the_canary_does_not_import_it(tmp_path):
    """[canary] enabled = false (the default): its package stays out of the daemon's memory."""
    config = fast_service.write_config(tmp_path, port=free_port())
    assert "[canary]\nenabled = false" in config.read_text()
    loaded = loaded_after(LEAN + DAEMON_MODULES + "from ddtreed.config import load\n"
                          "from ddtreed.loop.wiring import build\n"
                          f"wiring = build(load({str(config)!r}))\nassert wiring.canary is None\n")
    assert "ddtreed.loop.wiring" in loaded
    assert not [name for name in loaded if name.startswith("ddtreed.health.canary")]
