"""The per-host jobs behind `ddtreed fleet …`: each takes a Connection and returns JSON-able data."""

from __future__ import annotations

import json
import posixpath
import secrets
import stat
from typing import Any

import structlog

from ..service import pidfile
from .ssh import REMOTE_FAILED, TIMEOUT, Connection, FleetError

log = structlog.get_logger(__name__)

STDERR_TAIL_CHARS = 800  # enough for a traceback's last lines, short enough for a table cell


def remote_ddtreed(connection: Connection, args: list[str], config: bool = False,
                   ok_codes: tuple[int, ...] = (0,)) -> Any:
    """Run the inventory's remote `ddtreed` with quoted args and return its --json output."""
    entry = connection.entry
    argv = entry.ddtreed_argv + args + (["--config", entry.config] if config and entry.config else [])
    timeout = connection.remaining()
    result = connection.run(argv, timeout)
    parsed = _parse_json(result.stdout)
    if result.returncode == 124 and "timed out after" in result.stderr:
        raise FleetError(TIMEOUT, f"`{' '.join(args[:2])}` gave no answer within {timeout:.0f}s")
    if result.returncode not in ok_codes or (result.returncode != 0 and parsed is None):
        tail = result.stderr.strip()[-STDERR_TAIL_CHARS:] or "(no stderr)"
        raise FleetError(REMOTE_FAILED, f"`ddtreed {' '.join(args[:2])}` exited {result.returncode}: {tail}",
                         exit_code=result.returncode, result=parsed)
    if parsed is None and result.stdout.strip():
        raise FleetError(REMOTE_FAILED, f"`ddtreed {' '.join(args[:2])}` printed non-JSON output: "
                         f"{result.stdout.strip()[:200]!r}", exit_code=0)
    return parsed


def _parse_json(text: str) -> Any:
    """The JSON document on stdout; tolerates log lines printed before it (an unconfigured logger)."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.lstrip().startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[start:]))
            except ValueError:
                continue
    return None


def status(connection: Connection) -> Any:
    """The host's `ddtreed status --json`: read over SFTP where it can (fleet/remote_status.py)."""
    from .remote_status import status as read_status

    return read_status(connection, status_by_command)


def status_by_command(connection: Connection) -> Any:
    """The remote `ddtreed status --json` itself (one Python start on the host)."""
    # `ddtreed status` exits 1 (stale) or 3 (not running) with a full JSON answer: the host answered.
    return remote_ddtreed(connection, ["status", "--json", "--state-dir", connection.entry.state_dir],
                          config=True, ok_codes=(0, 1, 3))


def incidents(connection: Connection, limit: int) -> list[dict[str, Any]]:
    data = remote_ddtreed(connection, ["incidents", "--json", "--state-dir", connection.entry.state_dir,
                                       "--limit", str(limit)])
    if isinstance(data, dict):
        data = data.get("incidents", [])
    return [row for row in data or [] if isinstance(row, dict)]


def diagnose(connection: Connection, logfile: str) -> Any:
    """The remote config gives rules and launch context; else the pushed rules dir, else shipped rules."""
    entry = connection.entry
    args = ["diagnose", logfile, "--json"]
    if not entry.config and _remote_exists(connection, entry.rules_dir):
        args += ["--rules-dir", entry.rules_dir]
    return remote_ddtreed(connection, args, config=True)


def _remote_exists(connection: Connection, path: str) -> bool:
    try:
        connection.sftp().stat(path)
        return True
    except FileNotFoundError:
        return False


def remediate_apply(connection: Connection, remediation_id: str, dry_run: bool) -> Any:
    entry = connection.entry
    args = ["remediate", "apply", remediation_id, "--json", "--state-dir", entry.state_dir]
    if entry.site_packages and not entry.config:
        args += ["--site-packages", entry.site_packages]
    return remote_ddtreed(connection, args + (["--dry-run"] if dry_run else []), config=True)


def remediate_revert(connection: Connection, application_id: str) -> Any:
    args = ["remediate", "revert", application_id, "--json", "--state-dir", connection.entry.state_dir]
    return remote_ddtreed(connection, args)


def logs(connection: Connection, lines: int) -> dict[str, Any]:
    """The last `lines` lines of each current log file in the remote log dir (not rotated backups)."""
    log_dir = connection.entry.log_dir
    sftp = connection.sftp()
    try:
        listing = sftp.listdir_attr(log_dir)
    except FileNotFoundError:
        raise FleetError(REMOTE_FAILED, f"{log_dir}: no such log directory") from None
    names = sorted(item.filename for item in listing
                   if stat.S_ISREG(item.st_mode or 0) and _is_current_log(item.filename))
    files: dict[str, list[str]] = {}
    for name in names:
        path = posixpath.join(log_dir, name)
        result = connection.run(["tail", "-n", str(lines), "--", path], connection.remaining())
        if result.returncode != 0:
            raise FleetError(REMOTE_FAILED, f"tail {path} exited {result.returncode}: "
                             f"{result.stderr.strip()[-STDERR_TAIL_CHARS:]}", exit_code=result.returncode)
        files[path] = result.stdout.splitlines()
    return {"log_dir": log_dir, "files": files}


def _is_current_log(name: str) -> bool:
    """`x.log` yes; `x.log.1` (size-rotated backup) and dotfiles (temp files) no."""
    return not name.startswith(".") and not name.rsplit(".", 1)[-1].isdigit()


def rules_push(connection: Connection, files: dict[str, bytes]) -> dict[str, Any]:
    """Stage, validate remotely, swap in with posix_rename, drop stale rules, ask the daemon to reload."""
    entry = connection.entry
    sftp = connection.sftp()
    rules_dir = entry.rules_dir
    connection.run(["mkdir", "-p", "--", rules_dir], connection.remaining())
    staging = posixpath.join(rules_dir, f".ddtreed-push-{secrets.token_hex(6)}")
    sftp.mkdir(staging, 0o755)
    try:
        for name, data in sorted(files.items()):
            with sftp.open(posixpath.join(staging, name), "wb") as handle:
                handle.write(data)
        _check_staged(connection, staging)
        installed = _swap_in(connection, staging, rules_dir, files)
    finally:
        _remove_tree(connection, staging)
    stale = [name for name in sftp.listdir(rules_dir)
             if name.endswith(".toml") and not name.startswith(".") and name not in files]
    for name in stale:
        sftp.remove(posixpath.join(rules_dir, name))
    reload = reload_daemon(connection)
    log.info("fleet.rules_pushed", host=entry.name, files=len(installed), removed=len(stale), reload=reload)
    return {"rules_dir": rules_dir, "installed": installed, "removed": sorted(stale), "reload": reload}


def _check_staged(connection: Connection, staging: str) -> None:
    """The remote ddtreed validates the staged set; a rejection leaves the live rules untouched."""
    try:
        remote_ddtreed(connection, ["rules", "check", "--rules-dir", staging, "--json"])
    except FleetError as error:
        if error.reason == REMOTE_FAILED:
            problems = error.result.get("problems") if isinstance(error.result, dict) else None
            detail = "; ".join(map(str, problems)) if problems else error.detail
            raise FleetError(REMOTE_FAILED, f"rules rejected, old rules kept: {detail}",
                             exit_code=error.exit_code, result=error.result) from None
        raise


def _swap_in(connection: Connection, staging: str, rules_dir: str, files: dict[str, bytes]) -> list[str]:
    sftp = connection.sftp()
    # Data reaches the disk before the names change, so a crash leaves old or new files, never empty.
    connection.run(["sync", "--", *[posixpath.join(staging, name) for name in files]], connection.remaining())
    installed = []
    for name in sorted(files):
        sftp.posix_rename(posixpath.join(staging, name), posixpath.join(rules_dir, name))
        installed.append(name)
    connection.run(["sync", "--", rules_dir], connection.remaining())
    return installed


def _remove_tree(connection: Connection, staging: str) -> None:
    sftp = connection.sftp()
    try:
        for name in sftp.listdir(staging):
            sftp.remove(posixpath.join(staging, name))
        sftp.rmdir(staging)
    except FileNotFoundError:
        pass


def reload_daemon(connection: Connection) -> str:
    """SIGHUP the state dir's daemon named by <state_dir>/ddtreed.pid, once the host confirmed the
    pid is that daemon; else `systemctl reload ddtreed`; say which."""
    state_dir = connection.entry.state_dir
    pid_path = posixpath.join(state_dir, pidfile.PID_FILE)
    try:
        with connection.sftp().open(pid_path, "r") as handle:
            pid_text = handle.read(64).decode("ascii", "replace").strip()
    except FileNotFoundError:
        pid_text = ""
    refused = ""
    if pid_text.isdigit():
        facts = connection.run(["sh", "-c", pidfile.REMOTE_SCRIPT, "sh", pid_text, pid_path], connection.remaining())
        problem = pidfile.problem(pidfile.parse_remote(int(pid_text), facts.stdout), state_dir)
        if problem is None:
            result = connection.run(["kill", "-s", "HUP", "--", pid_text], connection.remaining())
            if result.returncode == 0:
                return f"SIGHUP sent to pid {pid_text}"
        else:
            log.warning("fleet.stale_pid_file", host=connection.entry.name, pid_file=pid_path, problem=problem)
            refused = f"no signal sent: {problem}; "
    active = connection.run(["systemctl", "is-active", "--quiet", "ddtreed.service"], connection.remaining())
    if active.returncode == 0:
        result = connection.run(["systemctl", "reload", "ddtreed.service"], connection.remaining())
        if result.returncode == 0:
            return refused + "systemctl reload ddtreed.service"
        raise FleetError(REMOTE_FAILED, f"{refused}systemctl reload failed: {result.stderr.strip()[-200:]}",
                         exit_code=result.returncode)
    return refused + "no running daemon to reload (rules apply at its next start)"
