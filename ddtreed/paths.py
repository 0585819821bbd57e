"""Where the shipped rule, remediation, example and unit files live, and whether a configured
one (or the config file) may be loaded at all.

They ship inside the package (`ddtreed/data/<kind>/`) and are found with importlib.resources
relative to the `ddtreed` package itself, so a wheel installed any way (venv, `pip install
--user`, a system or `--prefix` install, pipx) finds them, and no unrelated top-level package
(PyPI has one named `rules`) can stand in for them.
"""

from __future__ import annotations

import os
import stat
from importlib import resources
from pathlib import Path
from typing import Iterable

KINDS = ("rules", "remediations", "examples", "systemd")


def shipped(kind: str) -> Path:
    """The directory of the shipped `rules`, `remediations`, `examples` or `systemd` files.

    A missing directory is returned as is: the loader reports it in one line, naming it.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    # The package is installed as files (a wheel is never run zipped), so this is a real path.
    packaged = Path(str(resources.files("ddtreed").joinpath("data", kind)))
    return packaged


def untrusted(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]] = ()) -> str | None:
    """Why a rule/remediation file or directory must not be loaded ("refused: …"), or None.

    Rules, remediations and the config decide what the daemon patches and runs, so only root or
    ddtreed's own user may own them and nobody else may write them. `roots` are the configured
    directories the real path (symlinks resolved) must stay in.
    Raises OSError (FileNotFoundError…) when the path cannot be examined.
    """
    real = os.path.realpath(path)
    allowed = [os.path.realpath(root) for root in roots]
    if allowed and not any(real == root or os.path.commonpath((real, root)) == root for root in allowed):
        return f"refused: a symlink to {real}, outside the configured directories"
    info = os.stat(path)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return "refused: not a regular file"  # a FIFO or device would hang or flood the loader
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        return f"refused: world-writable (mode {mode:04o}); fix with chmod o-w {path}"
    if mode & stat.S_IWGRP and info.st_uid != os.geteuid():
        return (f"refused: group-writable (mode {mode:04o}) and owned by uid {info.st_uid}, not "
                f"ddtreed's uid {os.geteuid()}; fix with chmod g-w {path}")
    if info.st_uid not in (0, os.geteuid()):
        # Its owner can chmod it writable and edit it at will: only root and ddtreed's own user.
        return (f"refused: owned by uid {info.st_uid}, neither root nor ddtreed's uid {os.geteuid()}; "
                f"fix with chown {os.geteuid()} {path}")
    return None
