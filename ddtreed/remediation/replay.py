"""Journal replay at start: an interrupted apply is undone unless every file was already
written (then it is recorded); an interrupted revert is completed. Files that match neither
the old nor the new bytes were changed by someone else and are left alone, and said so."""

from __future__ import annotations

import os
import time
from typing import Any

import structlog

from ..service.host import Host, sha256_bytes
from .journal import Store

log = structlog.get_logger(__name__)


class Reconciled(str):
    """One sentence of what reconcile did, carrying the application and incident it concerns."""

    application_id: str | None = None
    incident_id: int | None = None
    # undid-apply | dropped-apply (no file had been written) | finished-apply | finished-revert | drifted
    action: str = ""

    @classmethod
    def of(cls, sentence: str, entry: dict[str, Any], action: str) -> "Reconciled":
        done = cls(sentence)
        done.application_id, done.incident_id, done.action = (
            entry.get("application_id"), entry.get("incident_id"), action)
        return done


def _current(host: Host, path: str) -> str | None:
    try:
        return sha256_bytes(host.read_bytes(path))
    except FileNotFoundError:
        return None


def _restore(host: Host, store: Store, changes: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Put the pre-image back where the new bytes are; return (paths restored, paths left alone
    because something else changed them)."""
    restored, foreign = [], []
    for change in changes:
        now = _current(host, change["path"])
        if now == change["after_sha256"]:
            host.write_atomic(change["path"], store.read_backup(change["backup_path"]))
            restored.append(change["path"])
        elif now != change["before_sha256"]:
            foreign.append(change["path"])
    return restored, foreign


def _finish_apply(host: Host, store: Store, entry: dict[str, Any]) -> str:
    changes = entry["files"]
    states = [_current(host, c["path"]) for c in changes]
    name = f"apply of {entry['remediation_id']} ({entry['application_id']})"
    if changes and all(now == c["after_sha256"] for now, c in zip(states, changes)):
        if store.find(entry["application_id"]) is None:
            store.upsert(entry)
        return Reconciled.of(f"finished the interrupted {name}: every file already had the new bytes; "
                             "recorded it", entry, "finished-apply")
    restored, foreign = _restore(host, store, changes)
    store.drop_backups(entry["application_id"])
    if restored:
        sentence = f"undid the interrupted {name}: restored the original bytes of {', '.join(restored)}"
    else:  # killed (or failed) before any target was written: there was nothing to undo
        sentence = f"dropped the interrupted {name}: no file had been changed"
    if foreign:
        sentence += f"; left {', '.join(foreign)} alone (changed by something else)"
    return Reconciled.of(sentence, entry, "undid-apply" if restored else "dropped-apply")


def _finish_revert(host: Host, store: Store, entry: dict[str, Any]) -> str:
    _restored, foreign = _restore(host, store, entry["files"])
    entry.update(status="reverted", reverted_at=time.time())
    store.upsert(entry)
    sentence = (f"completed the interrupted revert of {entry['remediation_id']} "
                f"({entry['application_id']}): original bytes restored")
    if foreign:
        sentence += f"; left {', '.join(foreign)} alone (changed by something else)"
    return Reconciled.of(sentence, entry, "finished-revert")


def _drift(host: Host, store: Store) -> list[str]:
    """Applied patches whose file no longer carries ddtreed's bytes (e.g. sglang reinstalled)."""
    notes = []
    for entry in store.entries():
        if entry["status"] not in ("applied", "verified") or entry["kind"] != "patch":
            continue
        states = [_current(host, c["path"]) for c in entry["files"]]
        if all(now == c["after_sha256"] for now, c in zip(states, entry["files"])):
            continue
        pristine = all(now == c["before_sha256"] for now, c in zip(states, entry["files"]))
        entry.update(status="undone-externally" if pristine else "overwritten", reverted_at=time.time())
        store.upsert(entry)
        what = "back to the original bytes" if pristine else "replaced by other bytes"
        notes.append(Reconciled.of(f"application {entry['application_id']} ({entry['remediation_id']}) "
                                   f"is no longer in place: its file is {what}; marked {entry['status']}",
                                   entry, "drifted"))
    return notes


def reconcile(host: Host, store: Store) -> list[str]:
    done = []
    journal = store.journal()
    if journal is not None:
        entry = journal["entry"]
        if journal["operation"] == "apply":
            done.append(_finish_apply(host, store, entry))
        else:
            done.append(_finish_revert(host, store, entry))
        store.clear_journal()
    for orphan in store.orphan_backups():
        store.drop_backups(orphan)
    done.extend(_drift(host, store))
    for sentence in done:
        log.warning("remediation_reconciled", detail=sentence, pid=os.getpid())
    return done
