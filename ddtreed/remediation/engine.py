"""Plan, apply, revert and reconcile remediations; patches are crash-safe through a journal.

Apply: backups → journal (fsync) → atomic writes → record → clear journal. Revert: journal →
atomic writes of the backup → record → clear journal. A SIGKILL anywhere leaves each target
file entirely old or entirely new (atomic rename), and `reconcile()` finishes the step.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import structlog

from ..service.host import Host, sha256_bytes
from ..records import IN_PLACE, Application, FileChange, LaunchChange, ServiceContext
from ..ops.redact import redact, restore_argv, restore_env
from . import launchplan, patching
from .applications import ApplicationTable
from .catalog import Catalog
from .journal import Store

log = structlog.get_logger(__name__)

# Test hook: `DDTREED_REMEDIATION_KILL_AT=apply:journal` SIGKILLs this process at that step,
# so the crash-safety tests hit every step deterministically (besides random-time kills).
_KILL_AT = "DDTREED_REMEDIATION_KILL_AT"


class ApplyError(RuntimeError):
    """A refusal to apply or revert; the message is one line for the user."""


@dataclass(frozen=True)
class PlannedFile:
    path: str
    relative: str
    before: bytes
    after: bytes


@dataclass(frozen=True)
class Plan:
    remediation_id: str
    kind: str
    applicable: bool
    reason: str
    diff: str = ""
    target: str = ""  # site-packages directory, or "launch"
    layout: str | None = None
    version: str | None = None
    already_applied: bool = False
    files: tuple[PlannedFile, ...] = ()
    launch: LaunchChange | None = None  # the argv/env after this step
    previous: LaunchChange | None = None  # the argv/env before it: the step's inverse


def _checkpoint(step: str) -> None:
    if os.environ.get(_KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _launch_dict(change: LaunchChange | None) -> dict[str, Any] | None:
    if change is None:
        return None
    return {"argv": list(change.argv), "env": dict(change.env), "description": change.description}


NO_SECRETS: tuple[tuple[str, ...], dict[str, str]] = ((), {})


def _launch(raw: dict[str, Any] | None, secrets_from=NO_SECRETS) -> LaunchChange | None:
    """A recorded launch; its secrets were redacted when stored and come back from the config."""
    if raw is None:
        return None
    argv, env = secrets_from
    return LaunchChange(argv=tuple(restore_argv(raw["argv"], argv)), env=restore_env(dict(raw["env"]), env),
                        description=raw["description"])


def to_application(entry: dict[str, Any], secrets_from=NO_SECRETS) -> Application:
    files = tuple(FileChange(f["path"], f["before_sha256"], f["after_sha256"], f["backup_path"])
                  for f in entry["files"])
    return Application(application_id=entry["application_id"], remediation_id=entry["remediation_id"],
                       kind=entry["kind"], target=entry["target"], summary=entry["summary"],
                       files=files, launch=_launch(entry.get("launch"), secrets_from),
                       applied_at=entry["applied_at"])


class Engine:
    def __init__(self, host: Host, state_dir: str, catalog: Catalog, incidents=None,
                 secrets_from: tuple[Sequence[str], Mapping[str, str]] = NO_SECRETS):
        """`incidents`: the incident Store the applications are written to (opened when None).
        `secrets_from`: the config's (argv, env); recorded launches are stored with their secrets
        redacted, and a launch read back to relaunch the service gets them from here."""
        self.host = host
        self.catalog = catalog
        self.secrets_from = (tuple(secrets_from[0]), dict(secrets_from[1]))
        self.store = Store(state_dir, ApplicationTable(state_dir, incidents))

    # ---- planning -------------------------------------------------------------------------
    def plan(self, remediation_id: str, context: ServiceContext | None = None, *,
             site_packages: str | None = None, env: Mapping[str, str] | None = None) -> Plan:
        """What applying would change, and whether it can; never writes anything."""
        remediation = self.catalog.get(remediation_id)
        context = context or ServiceContext(site_packages=site_packages)
        if remediation.kind == "patch":
            return self._plan_patch(remediation_id, site_packages or context.site_packages)
        env = dict(env or {})
        before = LaunchChange(argv=tuple(context.argv), env=env, description="before " + remediation_id)
        base = dict(remediation_id=remediation_id, kind=remediation.kind, target="launch",
                    version=context.sglang_version, previous=before)
        try:
            if remediation.kind == "args":
                argv, new_env = launchplan.plan_argv(remediation, context), env
                diff = launchplan.argv_diff(context.argv, argv)
            else:
                argv, new_env = tuple(context.argv), launchplan.plan_env(remediation, env)
                diff = launchplan.env_diff(env, new_env)
        except launchplan.NotApplicable as error:
            return Plan(applicable=False, reason=str(error), **base)
        after = LaunchChange(argv=argv, env=new_env, description=remediation.title)
        return Plan(applicable=True, reason=remediation.title, diff=diff, launch=after, **base)

    def _plan_patch(self, remediation_id: str, site_packages: str | None) -> Plan:
        base = dict(remediation_id=remediation_id, kind="patch", target=site_packages or "")
        if not site_packages:
            return Plan(applicable=False, reason="no site-packages directory known for the service", **base)
        check = patching.check_patch(self.host, site_packages, self.catalog.get(remediation_id))
        layout = check.layout.name if check.layout else None
        extra = dict(layout=layout, version=check.version, **base)
        if check.state == patching.APPLIED:
            return Plan(applicable=False, reason=check.reason, already_applied=True, **extra)
        if check.state == patching.REFUSED:
            return Plan(applicable=False, reason=check.reason, **extra)
        planned = PlannedFile(check.path, check.layout.target, check.before, check.after)
        diff = patching.unified_diff(planned.relative, planned.before, planned.after)
        return Plan(applicable=True, reason=check.reason, diff=diff, files=(planned,), **extra)

    # ---- apply ----------------------------------------------------------------------------
    def apply(self, plan: Plan, incident_id: int | None = None) -> Application:
        if not plan.applicable:
            raise ApplyError(f"{plan.remediation_id}: not applicable: {plan.reason}")
        application_id = f"{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"
        entry = {"application_id": application_id, "remediation_id": plan.remediation_id,
                 "kind": plan.kind, "target": plan.target, "summary": plan.reason,
                 "layout": plan.layout, "version": plan.version, "incident_id": incident_id,
                 "applied_at": time.time(), "status": "applied", "files": [],
                 "launch": _launch_dict(plan.launch), "previous": _launch_dict(plan.previous)}
        with self.store.lock():
            if plan.kind == "patch":
                self._apply_files(plan, entry)
            else:
                self.store.upsert(entry)
        log.info("remediation_applied", application_id=application_id,
                 remediation=plan.remediation_id, target=plan.target, incident=incident_id)
        return to_application(entry, self.secrets_from)

    def _apply_files(self, plan: Plan, entry: dict[str, Any]) -> None:
        application_id = entry["application_id"]
        for planned in plan.files:
            if self.host.read_bytes(planned.path) != planned.before:
                raise ApplyError(f"{planned.path} changed since the plan was made; plan again")
        try:
            for index, planned in enumerate(plan.files):
                entry["files"].append({
                    "path": planned.path, "relative": planned.relative,
                    "before_sha256": sha256_bytes(planned.before), "after_sha256": sha256_bytes(planned.after),
                    "backup_path": self.store.write_backup(application_id, f"{index}.before", planned.before),
                    "after_path": self.store.write_backup(application_id, f"{index}.after", planned.after)})
            _checkpoint("apply:backups")
            self.store.write_journal("apply", entry)
        except OSError as error:  # a full or read-only state dir: nothing was touched yet
            self.store.drop_backups(application_id)
            self.store.clear_journal()
            raise ApplyError(f"{plan.remediation_id}: cannot keep the backup in {self.store.root}: "
                             f"{error.strerror or error}") from None
        _checkpoint("apply:journal")
        written: list[PlannedFile] = []
        for index, planned in enumerate(plan.files):
            try:
                self.host.write_atomic(planned.path, planned.after)
            except OSError as error:
                self._undo_partial_apply(application_id, written)
                raise ApplyError(f"{planned.path}: cannot write the patch: {error.strerror or error} "
                                 "(read-only site-packages?); nothing was changed") from None
            written.append(planned)
            _checkpoint(f"apply:write:{index}")
        self.store.upsert(entry)
        _checkpoint("apply:recorded")
        self.store.clear_journal()

    def _undo_partial_apply(self, application_id: str, written: list[PlannedFile]) -> None:
        """A write failed: put back the files already written, then drop the journal and backups.
        Should a put-back fail too, the journal stays and the next start's reconcile finishes it."""
        for planned in reversed(written):
            self.host.write_atomic(planned.path, planned.before)
        self.store.clear_journal()
        self.store.drop_backups(application_id)

    # ---- revert ---------------------------------------------------------------------------
    def revert(self, application_id: str, force: bool = False) -> LaunchChange | None:
        """Undo an application; for args/env, return the launch to go back to."""
        with self.store.lock():
            entry = self.store.find(application_id)
            if entry is None:
                raise ApplyError(f"no application {application_id!r} in the incident database "
                                 f"of {self.store.root.parent}")
            if entry["status"] not in IN_PLACE:
                raise ApplyError(f"application {application_id} is already {entry['status']}")
            if entry["kind"] == "patch":
                self._revert_files(entry, force)
            else:
                entry.update(status="reverted", reverted_at=time.time())
                self.store.upsert(entry)
        log.info("remediation_reverted", application_id=application_id, remediation=entry["remediation_id"])
        return _launch(entry.get("previous"), self.secrets_from)

    def _revert_files(self, entry: dict[str, Any], force: bool) -> None:
        for change in entry["files"]:
            current = sha256_bytes(self.host.read_bytes(change["path"]))
            if current not in (change["after_sha256"], change["before_sha256"]) and not force:
                raise ApplyError(f"{change['path']} changed since ddtreed patched it (sha256 {current[:12]}…, "
                                 f"expected {change['after_sha256'][:12]}…); use --force to restore anyway")
        self.store.write_journal("revert", entry)
        _checkpoint("revert:journal")
        for index, change in enumerate(entry["files"]):
            self.host.write_atomic(change["path"], self.store.read_backup(change["backup_path"]))
            _checkpoint(f"revert:write:{index}")
        entry.update(status="reverted", reverted_at=time.time())
        self.store.upsert(entry)
        _checkpoint("revert:recorded")
        self.store.clear_journal()

    # ---- status and recovery --------------------------------------------------------------
    def history(self) -> list[dict[str, Any]]:
        """Every application with its status and, for patches, the file's hash now (for display:
        secrets in a recorded launch are redacted)."""
        entries = [redact(entry) for entry in self.store.entries()]
        for entry in entries:
            for change in entry["files"]:
                try:
                    change["current_sha256"] = sha256_bytes(self.host.read_bytes(change["path"]))
                except OSError:
                    change["current_sha256"] = None
        return entries

    def status(self) -> list[Application]:
        """The applications in place (applied or verified), oldest first."""
        return [to_application(e, self.secrets_from) for e in self.store.entries() if e["status"] in IN_PLACE]

    def reconcile(self) -> list[str]:
        """Finish or undo an operation a kill interrupted; one sentence per thing done."""
        from .replay import reconcile

        with self.store.lock():
            return reconcile(self.host, self.store)
