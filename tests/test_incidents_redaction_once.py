"""Secrets never reach the incident database, and its JSON columns are redacted once.

The JSON columns (`tracebacks`, `context`, `params`, …) are redacted element by element by
`encode.dumps` (mapping keys too) and are no longer run through the free-text patterns a second
time as JSON text (~1 ms of the incident row's ~1.5 ms of CPU, on the way to the row). Every
secret form is checked in the real SQLite file, read back with plain sqlite3."""

from __future__ import annotations

import sqlite3

from ddtreed.incidents import Store, encode
from ddtreed.ops.redact import REDACTED
from ddtreed.records import Crash, ServiceContext

SECRETS = ("sk-FLAG-1", "sk-EQ-2", "hf_ENV-3", "sk-REPR-4", "sk-KEY-5", "sk-JSONQ-6", "sk-FIELD-7", "sk-ARGV-8")


def crash() -> Crash:
    excerpt = (f"serve --api-key {SECRETS[0]} --admin-api-key={SECRETS[1]}",
               f"HF_TOKEN={SECRETS[2]} python -m sglang.launch_server",
               f"server_args=ServerArgs(api_key='{SECRETS[3]}', port=1)",
               f'config: {{"api_key": "{SECRETS[5]}"}}')
    return Crash(kind="traceback", exception="RuntimeError", message=f"failed with --api-key {SECRETS[0]}",
                 excerpt=excerpt)


def stored(path) -> str:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT * FROM incidents").fetchall() + connection.execute(
            "SELECT * FROM steps").fetchall()
    return "\n".join(str(value) for row in rows for value in row)


def test_no_secret_form_reaches_the_incident_row_or_its_steps(tmp_path):
    path = tmp_path / "incidents.sqlite3"
    context = {"argv": ["--api-key", SECRETS[7]], "env": {"HF_TOKEN": SECRETS[2]}, "db_password": SECRETS[6],
               f"--api-key {SECRETS[4]}": "a key that holds a secret"}
    with Store(path) as store:
        incident = store.open_incident("crash", (crash(),), context=context,
                                       evidence={"stderr_tail": [f"--hf-token {SECRETS[4]}"]})
        store.add_step(incident, "diagnosed", f"HF_TOKEN={SECRETS[2]}", {"argv": ["--api-key", SECRETS[7]]})
    text = stored(path)
    assert not [secret for secret in SECRETS if secret in text], text
    assert REDACTED in text and "sglang.launch_server" in text and "a key that holds a secret" in text


def test_json_columns_are_not_redacted_again_as_text():
    value = encode.dumps({"excerpt": ["HF_TOKEN=x"]})
    assert isinstance(value, encode.Redacted) and "HF_TOKEN=<redacted>" in value
    assert encode.text(value) is value  # the JSON text passes through untouched
    assert encode.clean_row({"tracebacks": value, "message": "HF_TOKEN=y"}) == {
        "tracebacks": value, "message": "HF_TOKEN=<redacted>"}


def test_a_context_row_reads_back_as_it_was_written(tmp_path):
    context = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32, tp_size=2)
    with Store(tmp_path / "incidents.sqlite3") as store:
        incident = store.open_incident("crash", (crash(),), context=context)
        got = store.get(incident)
    assert got["context"]["speculative_algorithm"] == "DDTREE" and got["context"]["tp_size"] == 2
    assert got["tracebacks"][0]["excerpt"][1] == f"HF_TOKEN={REDACTED} python -m sglang.launch_server"
