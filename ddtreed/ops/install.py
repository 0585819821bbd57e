"""`ddtreed install`: the systemd unit, a config skeleton and tight state/log directories.

Planning is separate from doing, so `--dry-run` prints exactly the steps a real run takes.
Paths inside the files are the target system's (/etc, /var); `root` only says where to write.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from . import unitfile
from ..config import ConfigError, from_mapping

TEMPLATE_UNIT = "ddtreed@.service"
EXAMPLE_CONFIG = "founding-ddtree-tp8.toml"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# The founding deployment's launch command: used when no shipped example is found.
FOUNDING_ARGV = (
    "python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.6", "--tp", "8",
    "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
    "SubSir/Kimi-K2.6-DFlash-tmp-long", "--speculative-num-draft-tokens", "8",
    "--speculative-ddtree-budget", "32", "--page-size", "1", "--port", "30000",
)


class InstallError(ValueError):
    """A problem with the install request, as one line."""


@dataclass(frozen=True)
class Step:
    """One thing install does: create a directory, write a file, or keep what is there."""

    action: str  # "mkdir" | "chmod" | "write" | "keep"
    path: Path
    mode: int
    content: bytes | None = None
    owner: str | None = None
    note: str = ""

    def describe(self, dry_run: bool) -> str:
        verb = {"mkdir": "create directory", "chmod": "tighten", "write": "write", "keep": "keep"}[self.action]
        verb = f"would {verb}" if dry_run and self.action != "keep" else verb
        owner = f", owner {self.owner}" if self.owner and self.action != "keep" else ""
        mode = f" ({self.mode:04o}{owner})" if self.action != "keep" else ""
        return f"{verb} {self.path}{mode}" + (f": {self.note}" if self.note else "")


def plan(root: str, name: str, user: str | None = None, force: bool = False) -> list[Step]:
    """The steps that install `ddtreed@name` under `root`, without touching anything."""
    if not _NAME.match(name):
        raise InstallError(f"--config-name must be letters, digits, '_', '.', '-' (at most 64), got {name!r}")
    if user is not None:
        _check_user(user)
    base = Path(root)
    unit_path = base / "etc/systemd/system" / TEMPLATE_UNIT
    config_path = base / "etc/ddtreed" / f"{name}.toml"
    unit = unit_text(user).encode()
    unchanged = unit_path.exists() and unit_path.read_bytes() == unit
    steps = [
        *_directory(base / "var/lib/ddtreed" / name, 0o700, user, "state: incidents.sqlite3 (0600), backups"),
        *_directory(base / "var/log/ddtreed" / name, 0o750, user, "the service's stdout/stderr"),
        Step("keep", unit_path, 0o644, note="unit unchanged") if unchanged else
        Step("write", unit_path, 0o644, unit, note="the unit (local changes belong in `systemctl edit`)"),
    ]
    if config_path.exists() and not force:
        steps.append(Step("keep", config_path, 0o640, note="config exists (--force overwrites it)"))
    else:
        steps.append(Step("write", config_path, 0o640, config_text(name).encode(),
                          note="EDIT service.argv: it is the founding example's"))
    return steps


def apply(steps: list[Step]) -> None:
    """Carry out `plan`'s steps; files are written atomically."""
    from ..service.host import write_atomic

    for step in steps:
        if step.action == "mkdir":
            step.path.mkdir(parents=True, exist_ok=True)
        if step.action in ("mkdir", "chmod"):
            os.chmod(step.path, step.mode)  # mkdir's mode is filtered by the umask; this is not
        elif step.action == "write":
            step.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(step.path), step.content or b"", mode=step.mode)
        if step.owner and step.action != "keep":
            entry = pwd.getpwnam(step.owner)
            os.chown(step.path, entry.pw_uid, entry.pw_gid)


def unit_text(user: str | None = None) -> str:
    """The shipped template unit, starting this installation's ddtreed (and as `user`)."""
    source = paths.shipped("systemd") / TEMPLATE_UNIT
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as error:
        raise InstallError(f"{source}: cannot read the shipped unit: {error.strerror}") from None
    text = text.replace("ExecStart=/usr/local/bin/ddtreed ", f"ExecStart={ddtreed_command()} ", 1)
    text = unitfile.for_systemd(text, unitfile.systemd_version())  # Type=notify-reload on 253+
    if user:
        # Without User= the unit runs as root, which patching a root-owned venv needs.
        text = text.replace("[Service]\n", f"[Service]\nUser={user}\n", 1)
    return text


def ddtreed_command() -> str:
    """How systemd should start this ddtreed: its console script, else `python -m ddtreed`."""
    script = Path(sys.executable).parent / "ddtreed"
    if os.access(script, os.X_OK):
        return str(script)
    return f"{sys.executable} -m ddtreed"


def config_text(name: str) -> str:
    """A config skeleton that loads as is; service.argv is an example to replace."""
    argv, env = _example_service()
    lines = [
        f"# ddtreed config for `ddtreed@{name}` (written by `ddtreed install`).",
        "# EDIT ME: service.argv is the founding example's launch command (DDTree, TP8). Replace it",
        "# with your server's command, one token per item. Every key, with its default and meaning:",
        f"# {paths.shipped('examples') / EXAMPLE_CONFIG}",
        "",
        "[service]",
        "argv = [",
        *_argv_lines(argv),
        "]",
        '# python = "/opt/sglang/venv/bin/python"  # the service\'s interpreter (version, site-packages)',
        "env = { " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items()) + " }",
        "",
        "[paths]",
        f'state_dir = "/var/lib/ddtreed/{name}"  # the unit\'s StateDirectory=',
        f'log_dir = "/var/log/ddtreed/{name}"    # the unit\'s LogsDirectory=',
        "",
        "[policy]",
        'mode = "auto"  # auto: apply fixes | advise: record what it would do | off: supervise only',
        "",
        "[metrics]",
        '# listen = "127.0.0.1:9477"  # Prometheus text endpoint; off when unset',
        "",
    ]
    text = "\n".join(lines)
    try:
        from_mapping(tomllib.loads(text), source=f"{name}.toml")
    except (ConfigError, tomllib.TOMLDecodeError) as error:  # a shipped example we cannot use
        raise InstallError(f"the generated config does not load: {error}") from None
    return text


def _argv_lines(argv: tuple[str, ...]) -> list[str]:
    """One line for the command, then one per flag with its values: readable and editable."""
    groups: list[list[str]] = [[]]
    for token in argv:
        if token.startswith("--"):
            groups.append([])
        groups[-1].append(token)
    return ["  " + " ".join(json.dumps(token) + "," for token in group) for group in groups if group]


def _example_service() -> tuple[tuple[str, ...], dict[str, str]]:
    """argv and env of the shipped founding example, when it is there and readable."""
    example = paths.shipped("examples") / EXAMPLE_CONFIG
    try:
        service = tomllib.loads(example.read_text(encoding="utf-8"))["service"]
        argv = tuple(str(token) for token in service["argv"])
        env = {str(key): str(value) for key, value in service.get("env", {}).items()}
    except (OSError, KeyError, TypeError, AttributeError, tomllib.TOMLDecodeError):
        return FOUNDING_ARGV, {}
    return (argv or FOUNDING_ARGV), env


def _directory(path: Path, mode: int, user: str | None, note: str) -> list[Step]:
    if not path.is_dir():
        return [Step("mkdir", path, mode, owner=user, note=note)]
    if path.stat().st_mode & 0o777 & ~mode:
        return [Step("chmod", path, mode, owner=user, note=f"was {path.stat().st_mode & 0o777:04o}")]
    return [Step("keep", path, mode, note="directory exists with tight permissions")]


def _check_user(user: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise InstallError(f"--user {user}: no such user on this machine") from None
