"""Back to a known configuration after ddtreed itself died: the first thing a daemon does.

The service must start in its last verified configuration. What a killed ddtreed left half-done
is finished or undone (the remediation journal), fixes it had applied but not yet verified are
reverted, its service tree (found by the environment token) is stopped, and incidents it left
open are closed, each with a `reconciled` step saying what happened.
"""

from __future__ import annotations

import structlog

from ..service.host import Host
from ..incidents import StoreError
from ..service.launch import CHILD_NAME_PATTERNS
from ..records import LaunchChange
from ..remediation import Engine
from ..ops.status import DaemonStatus, read_status

log = structlog.get_logger(__name__)


def previous_record(state_dir: str) -> DaemonStatus | None:
    """The previous daemon's snapshot. Read it before this daemon writes its own: that record is
    how its leftover service is found (its pid and environment token)."""
    try:
        return read_status(state_dir)
    except ValueError as error:  # an unreadable snapshot: recovery falls back to port and program
        log.warning("previous_status_unreadable", error=str(error))
        return None


def recover(engine: Engine, store, host: Host, state_dir: str, previous: DaemonStatus | None = None,
            port: int | None = None) -> tuple[int, ...]:
    """Reconcile the journal, stop a leftover service, revert unverified fixes, close incidents.

    `previous` is the record the dead daemon left (None: none, or unreadable); the state dir in
    the service's environment and its `port` find the service without it. Returns the ids of the
    incidents it closed or noted (the dead daemon's open ones), oldest first.
    """
    said: dict[int, list[str]] = {}  # incident id → what recovery did to its fixes, in order
    undone: set[int] = set()  # incidents of which a change to the host was undone just now
    for done in engine.reconcile():
        log.warning("reconciled", detail=str(done))
        if getattr(done, "incident_id", None) is not None:
            # A finished apply is still unverified: the sweep below reverts it. A verified fix
            # undone from outside (a reinstall) keeps its verification: if its crash comes back,
            # that is a recurrence (revert, freeze, escalate).
            _note(store, done.incident_id, str(done), done.application_id,
                  reverted=done.action in ("undid-apply", "dropped-apply", "finished-revert"))
            said.setdefault(done.incident_id, []).append(str(done))
            if done.action != "dropped-apply":  # a dropped apply had written nothing
                undone.add(done.incident_id)
    still_running = stop_leftover_service(host, state_dir, previous, port)
    for entry in engine.history():
        if entry["status"] == "applied" and entry.get("incident_id") is not None:  # applied, not verified
            if still_running:  # its files are in use by a service that survived SIGKILL: keep them
                log.error("unverified_fix_kept", application_id=entry["application_id"],
                          hint="a leftover service still runs on it; it is reverted at the next start")
                _note(store, entry["incident_id"], f"kept {entry['remediation_id']} (applied, not verified): "
                      "a leftover service still runs on it; the next start reverts it", None)
                continue
            engine.revert(entry["application_id"])
            sentence = f"reverted {entry['remediation_id']}: applied but not verified when ddtreed stopped"
            _note(store, entry["incident_id"], sentence, entry["application_id"])
            said.setdefault(entry["incident_id"], []).append(sentence)
            undone.add(entry["incident_id"])
    for incident_id in said:
        _close(store, incident_id, said[incident_id], incident_id in undone)
    touched = set(said)
    for incident in store.list_incidents(limit=100, status="open"):
        steps = {step["step"] for step in store.get(incident["id"])["steps"]}
        if "not-remediated" not in steps and incident["id"] not in said:  # open because ddtreed died
            _close(store, incident["id"], [], False)
            touched.add(incident["id"])
    return tuple(sorted(touched))


def verified_launch(engine: Engine) -> LaunchChange | None:
    """The newest verified flag/env fix: it outlives ddtreed, so the service relaunches with it."""
    launches = [entry for entry in engine.history()
                if entry["status"] == "verified" and entry.get("launch") is not None]
    if not launches:
        return None
    newest = max(launches, key=lambda entry: entry["applied_at"])
    log.info("verified_launch_adopted", remediation=newest["remediation_id"],
             application_id=newest["application_id"])
    launch = newest["launch"]
    return LaunchChange(tuple(launch["argv"]), dict(launch["env"]), launch["description"])


def stop_leftover_service(host: Host, state_dir: str, previous: DaemonStatus | None, port: int | None) -> bool:
    """A ddtreed killed outside systemd leaves its service running: that tree goes first.

    Found by the previous record's environment token, else by the service token of any process
    whose environment names this state dir or that holds the port; its SGLang children go with
    their sessions and token. True when something of it survived (the caller keeps its files).
    """
    recorded = previous.service_token if previous is not None else None
    tokens = ({recorded} if recorded else set()) | set(host.leftover_tokens(str(state_dir), port))
    survived = False
    for token in sorted(token for token in tokens if host.token_holders(token)):
        killed, left = sweep_until_gone(host, token)
        log.warning("leftover_service_stopped", pids=killed,
                    found_by="record" if token == recorded else "state dir or port",
                    previous_daemon_pid=previous.pid if previous is not None else None,
                    hint="the previous ddtreed died without stopping its service")
        if left:
            survived = True
            log.error("leftover_service_survived", pids=left,
                      hint="processes survived SIGKILL (uninterruptible sleep in a driver?)")
    return survived


SWEEP_ROUNDS = 50  # bounds a tree that keeps forking; each round kills what the one before missed


def sweep_until_gone(host: Host, token: str) -> tuple[list[int], list[int]]:
    """Sweep the token's tree until no process carries the token: (pids killed, pids left).

    One sweep lists the sessions' processes, then kills them: a launcher still starting workers
    forks children after the list was taken, and those outlive the sweep (holding the port they
    inherited). Rounds repeat while a round still finds processes it had not killed before;
    processes that survive SIGKILL itself (a driver call) end the rounds at once.
    """
    killed: set[int] = set()
    left: list[int] = []
    for _ in range(SWEEP_ROUNDS):
        new = set(host.sweep_token(token, CHILD_NAME_PATTERNS)) - killed
        killed |= new
        left = host.token_holders(token)
        if not left or not new:
            break
    return sorted(killed), left


def _note(store, incident_id: int, sentence: str, application_id: str | None, reverted: bool = True) -> None:
    """Say in the incident what recovery did (a `reconciled` step); mark a reverted application."""
    try:
        store.add_step(incident_id, "reconciled", sentence)
        if reverted and application_id is not None and store.application_entry(application_id) is not None:
            store.mark_application(application_id, "reverted")
    except StoreError as error:  # an incident the database no longer has: the log line stays
        log.warning("recovery_not_recorded", incident_id=incident_id, error=str(error))


STOPPED = "ddtreed stopped before this incident closed"
UNCHANGED = "nothing had been changed; the service starts in its last verified configuration"


def _close(store, incident_id: int, said: list[str], undone: bool) -> None:
    """Close an incident the dead daemon left open, with the status that says what happened.

    `reverted`: a fix of it had changed something that is undone now (by this recovery, the
    journal, from outside, or already by the dead daemon). `resolved`: its fix had been verified
    before the kill and stays. `interrupted`: no fix of it was ever applied. One still in place
    and unverified (kept for a leftover service) leaves it open: the next start reverts and closes it.
    """
    try:
        incident = store.get(incident_id)
        if incident["status"] != "open":
            return
        applications = incident["applications"]
        if any(application["status"] == "applied" for application in applications):
            return
        verified = [application["remediation_id"] for application in applications
                    if application["status"] == "verified"]
        if not said:  # nothing done to its fixes now: the step says where they stood
            store.add_step(incident_id, "reconciled", f"{STOPPED}; " + (
                f"{', '.join(verified)} had been verified and stays" if verified else
                "its fix had been reverted before; the service starts in its last verified configuration"
                if applications else UNCHANGED))
        if verified:
            store.finish(incident_id, "resolved", f"{', '.join(verified)} held; ddtreed stopped before "
                         "it closed this incident; the fix stays" + "".join(f"; {s}" for s in said))
        elif undone or applications:
            store.finish(incident_id, "reverted", "ddtreed stopped mid-remediation; " + (
                "; ".join(said) if said else "its fix had been reverted before"))
        else:
            store.finish(incident_id, "interrupted", f"{STOPPED}; " + "; ".join([*said, UNCHANGED]))
    except StoreError as error:  # an incident the database no longer has: the log line stays
        log.warning("recovery_not_recorded", incident_id=incident_id, error=str(error))
