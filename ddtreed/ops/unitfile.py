"""The shipped systemd unit adapted to the systemd that will run it.

systemd 253 added `Type=notify-reload`: systemd sends the reload signal itself and `systemctl
reload` waits for the service's RELOADING=1 … READY=1, so a reload is synchronous and its failure
visible. ddtreed speaks that protocol already (`notify.Notifier.reloading`). Older systemd rejects
the type, so the shipped file says `Type=notify` with an asynchronous `ExecReload=kill -HUP`, and
`for_systemd()` upgrades it where the installed systemd supports it.
"""

from __future__ import annotations

import re
import shutil
import subprocess

NOTIFY_RELOAD_SINCE = 253


def systemd_version() -> int | None:
    """The installed systemd's major version (`systemctl --version`), None when unknown."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None
    try:
        done = subprocess.run([systemctl, "--version"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"systemd (\d+)", done.stdout)
    return int(match.group(1)) if match else None


def for_systemd(text: str, version: int | None) -> str:
    """`text` with Type=notify-reload (and no ExecReload=) when `version` supports it."""
    if version is None or version < NOTIFY_RELOAD_SINCE:
        return text
    text = re.sub(r"(?m)^Type=notify$", "Type=notify-reload\nReloadSignal=SIGHUP", text, count=1)
    return re.sub(r"(?m)^ExecReload=.*\n", "", text, count=1)
