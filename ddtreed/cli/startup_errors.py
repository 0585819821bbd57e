"""Operating-system failures at start or run time as one line that names the config key.

`ddtreed run` meets the host's file system and process table first: a missing interpreter
(spawn ENOENT), an unexecutable script (EACCES), a log or state directory it cannot create. Each
becomes `CONFIG: KEY = PATH: what went wrong (what it is for)` and exit code 2, never a traceback.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Iterable

EXIT_OS_ERROR = 2  # a configuration the host cannot run: systemd must not retry it (RestartPreventExitStatus)

_PURPOSE = {
    "service.argv[0]": "the service cannot be started",
    "service.python": "the service's interpreter",
    "service.cwd": "the service's working directory",
    "paths.log_dir": "the service's stdout/stderr files go there",
    "paths.state_dir": "the incident database, backups and journal live there",
    "paths.extra_logs": "a log file ddtreed follows",
    "paths.rules_dirs": "rule files",
    "paths.remediations_dirs": "remediation files",
}


def _candidates(config) -> Iterable[tuple[str, str, bool]]:
    """(key, path, is a directory whose contents count) for every path-valued config key."""
    service, paths = config.service, config.paths
    if service.argv:
        program = service.argv[0]
        yield "service.argv[0]", program, False
        if os.sep not in program:
            found = shutil.which(program, path=service.env.get("PATH", os.environ.get("PATH")))
            if found:
                yield "service.argv[0]", found, False
    if service.python:
        yield "service.python", service.python, False
    if service.cwd:
        yield "service.cwd", service.cwd, False
    yield "paths.log_dir", paths.log_dir, True
    yield "paths.state_dir", paths.state_dir, True
    for item in paths.extra_logs:
        yield "paths.extra_logs", item, False
    for item in paths.rules_dirs:
        yield "paths.rules_dirs", item, True
    for item in paths.remediations_dirs:
        yield "paths.remediations_dirs", item, True


def config_key_for(path: str | None, config) -> tuple[str, str] | None:
    """(key, the key's value) that `path` belongs to, or None."""
    if not path or config is None:
        return None
    path = os.path.normpath(str(path))
    for key, value, directory in _candidates(config):
        value = os.path.normpath(value)
        if path == value or (directory and path.startswith(value.rstrip(os.sep) + os.sep)):
            return key, value
        # A parent of the directory ddtreed had to create (makedirs fails on the first one).
        if directory and value.startswith(path.rstrip(os.sep) + os.sep):
            return key, value
    return None


_QUOTED_PATH = re.compile(r"(/[^\s:'\"]+)")


def describe(error: BaseException, config: Any) -> str | None:
    """The one-line message for an OS (or state-dir) error, or None when nothing in it is known."""
    source = getattr(config, "source", None) or "config"
    if isinstance(error, OSError):
        path = error.filename
        reason = error.strerror or str(error)
        if error.filename2:
            reason += f" ({error.filename2})"
    else:  # a StoreError: its text names the database file
        text = str(error)
        found = _QUOTED_PATH.search(text)
        path, reason = (found.group(1), text) if found else (None, text)
    owner = config_key_for(path, config)
    if owner is None:
        return None
    key, value = owner
    where = f"{key} = {value}"
    if path and os.path.normpath(str(path)) != value and not str(reason).startswith(str(path)):
        where += f": {path}"
    reason = str(reason)
    if reason.startswith(str(path)):
        reason = reason[len(str(path)):].lstrip(": ")
    return f"{source}: {where}: {reason} ({_PURPOSE.get(key, 'named in the config')})"


def find_os_cause(error: BaseException) -> BaseException | None:
    """The OSError (or state-dir StoreError) behind `error`, following causes and contexts."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 8:
        if isinstance(current, OSError) or type(current).__name__ == "StoreError":
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None
