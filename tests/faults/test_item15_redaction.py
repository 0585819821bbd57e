"""Item 15 of issue 16: secrets in argv and env never reach what ddtreed writes (the incidents
table, `incidents --json`, the patch journal, structured logs, the status file)."""

from __future__ import annotations

import json
from pathlib import Path

import fast_service
import psutil
import pytest
from hostile import DaemonProcess, free_port, run_cli, wait_for

from ddtreed.incidents import encode
from ddtreed.ops.redact import REDACTED, redact, redact_argv, redact_env, redact_text

SECRETS = ("sk-LIVE-111", "sk-ADMIN-222", "hf_SECRET333", "sk-REPR-444")


@pytest.mark.parametrize("argv, expected", [
    (["--api-key", "sk-1"], ["--api-key", REDACTED]),
    (["--api-key=sk-1"], [f"--api-key={REDACTED}"]),
    (["--admin-api-key", "sk-1", "--port", "3"], ["--admin-api-key", REDACTED, "--port", "3"]),
    (["--hf-token", "t"], ["--hf-token", REDACTED]),
    (["--ssl-keyfile", "/k.pem", "--tokenizer-path", "/t"], ["--ssl-keyfile", "/k.pem", "--tokenizer-path", "/t"]),
    (["sh", "-c", "serve --api-key sk-1"], ["sh", "-c", f"serve --api-key {REDACTED}"]),
])
def test_item15_redact_argv(argv, expected):
    assert redact_argv(argv) == expected


def test_item15_redact_env_and_text():
    env = {"HF_TOKEN": "a", "OPENAI_API_KEY": "b", "AWS_SECRET": "c", "DB_PASSWORD_FILE": "d",
           "PATH": "/bin", "DDTREED_SERVICE_TOKEN": "kept: recovery finds the service by it"}
    assert redact_env(env) == {**{k: REDACTED for k in list(env)[:4]}, "PATH": "/bin",
                               "DDTREED_SERVICE_TOKEN": env["DDTREED_SERVICE_TOKEN"]}
    line = "server_args=ServerArgs(api_key='sk-9', admin_api_key=None, port=1) HF_TOKEN=x --api-key=y"
    assert redact_text(line) == (f"server_args=ServerArgs(api_key='{REDACTED}', admin_api_key=None, port=1) "
                                 f"HF_TOKEN={REDACTED} --api-key={REDACTED}")
    assert redact({"context": {"argv": ["--api-key", "k"], "api_key": "k", "key": "shown"}}) == {
        "context": {"argv": ["--api-key", REDACTED], "api_key": REDACTED, "key": "shown"}}
    assert "sk-9" not in encode.dumps({"tracebacks": [{"excerpt": [line]}]})


@pytest.mark.slow
def test_item15_no_secret_reaches_anything_ddtreed_writes(tmp_path):
    """A real crash → patch → verify cycle of a service launched with secrets in argv and env."""
    directory = tmp_path / "run"
    port = free_port()
    site = directory.resolve() / "site-packages"
    repo = Path(fast_service.__file__).resolve().parents[2]
    config = fast_service.write_config(
        directory, port=port,
        extra_args=("--api-key", SECRETS[0], f"--admin-api-key={SECRETS[1]}",
                    f"--served-model-name=api_key='{SECRETS[3]}'"),
        service={"env": {"PYTHONPATH": f"{site}:{repo}", "PYTHONUNBUFFERED": "1", "HF_TOKEN": SECRETS[2]}})
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_resolved"), 60, what="the crash to be fixed and verified")
        # The service itself still gets its real key: only what ddtreed writes is redacted.
        service = [p for p in psutil.process_iter(["cmdline"]) if SECRETS[0] in (p.info["cmdline"] or ())]
        assert service and psutil.Process(service[0].pid).environ().get("HF_TOKEN") == SECRETS[2]
        state_dir = directory / "state"
        listing = run_cli("incidents", "--json", "--state-dir", str(state_dir))
        shown = run_cli("incidents", "show", "1", "--json", "--state-dir", str(state_dir))
    finally:
        assert daemon.stop() == 0
    assert listing.returncode == 0 and shown.returncode == 0, listing.stderr + shown.stderr
    incident = json.loads(shown.stdout)
    assert REDACTED in json.dumps(incident["context"]), incident["context"]
    written = {str(path): path.read_bytes() for path in state_dir.rglob("*") if path.is_file()}
    written["daemon log"] = (tmp_path / "daemon.jsonl").read_bytes()
    written["incidents --json"] = listing.stdout.encode()
    written["incidents show --json"] = shown.stdout.encode()
    assert any(name.endswith("incidents.sqlite3") for name in written) and "daemon log" in written
    leaks = [(name, secret) for name, data in written.items() for secret in SECRETS if secret.encode() in data]
    assert leaks == []
    started = daemon.events("service.started")
    assert started and all(REDACTED in event["argv"] for event in started)


def test_item15_restore_puts_each_secret_back_by_its_flag():
    from ddtreed.ops.redact import restore_argv, restore_env

    reference = ["serve", "--api-key", "sk-1", "--admin-api-key=sk-2", "--port", "3"]
    stored = redact_argv(reference + ["--disable-cuda-graph"])
    assert "sk-1" not in stored and restore_argv(stored, reference) == reference + ["--disable-cuda-graph"]
    assert restore_argv(["--api-key", REDACTED], []) == ["--api-key", REDACTED]  # no reference: stays hidden
    assert restore_env({"HF_TOKEN": REDACTED, "A": "1"}, {"HF_TOKEN": "hf"}) == {"HF_TOKEN": "hf", "A": "1"}


def test_item15_a_flag_fix_is_stored_redacted_and_relaunches_with_the_real_key(tmp_path):
    """The applications table holds the launch a verified fix relaunches with: stored without the
    secret, it must still relaunch the service with it (taken from the config)."""
    from ddtreed.service.host import LocalHost
    from ddtreed.paths import shipped
    from ddtreed.records import ServiceContext
    from ddtreed.remediation import Engine, load_remediations

    argv = ("python", "-m", "sglang.launch_server", "--model-path", "m", "--speculative-algorithm", "DDTREE",
            "--api-key", SECRETS[0], "--port", "30000")
    env = {"HF_TOKEN": SECRETS[2]}
    catalog = load_remediations([shipped("remediations")])
    engine = Engine(LocalHost(), str(tmp_path / "state"), catalog, secrets_from=(argv, env))
    plan = engine.plan("disable-cuda-graph", ServiceContext(argv=argv), env=env)
    assert plan.applicable, plan.reason
    engine.apply(plan)
    stored = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*") if path.is_file())
    assert SECRETS[0].encode() not in stored and SECRETS[2].encode() not in stored
    relaunch = Engine(LocalHost(), str(tmp_path / "state"), catalog, secrets_from=(argv, env)).status()[0].launch
    assert SECRETS[0] in relaunch.argv and "--disable-cuda-graph" in relaunch.argv
    assert relaunch.env["HF_TOKEN"] == SECRETS[2]
    shown = Engine(LocalHost(), str(tmp_path / "state"), catalog).history()[0]["launch"]
    assert SECRETS[0] not in json.dumps(shown)
