"""sd_notify: tell systemd that ddtreed is ready, what it is doing, and that its loop is alive.

The protocol is one datagram of `KEY=value` lines to the AF_UNIX socket named in $NOTIFY_SOCKET
(a path, or `@name` in the abstract namespace). Without that variable every call is a no-op, and
no call ever raises: a supervisor must not die because the service manager went away.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)

# What systemd hands to ddtreed and ddtreed must not hand on to the SGLang tree (a child that
# inherits NOTIFY_SOCKET could otherwise report READY or STOPPING in ddtreed's name).
SYSTEMD_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def scrub_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` without the service-manager variables meant for ddtreed alone."""
    return {key: value for key, value in env.items() if key not in SYSTEMD_VARIABLES}


class Notifier:
    """Sends sd_notify messages; every method is safe to call when not run by systemd."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None):
        self.address = address or None
        self._watchdog_usec = watchdog_usec
        self._socket: socket.socket | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, unset: bool = False) -> "Notifier":
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (default: os.environ).

        unset=True then removes them from os.environ, so that children never inherit them.
        """
        source = os.environ if environ is None else environ
        notifier = cls(source.get("NOTIFY_SOCKET"), _watchdog_usec(source))
        if unset and environ is None:
            for key in SYSTEMD_VARIABLES:
                os.environ.pop(key, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def ready(self, status: str | None = None) -> bool:
        """READY=1: ddtreed supervises (sent long before the model has loaded)."""
        return self.send("READY=1", *([_status_line(status)] if status else []))

    def status(self, text: str) -> bool:
        """STATUS=: one line for `systemctl status`, e.g. `loading weights 3/8`."""
        return self.send(_status_line(text))

    def watchdog(self) -> bool:
        """WATCHDOG=1: the main loop is alive; call at least every watchdog_interval() seconds."""
        return self.send("WATCHDOG=1")

    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half of WATCHDOG_USEC), or None when no watchdog is set."""
        if not self.enabled or not self._watchdog_usec:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    def stopping(self, status: str | None = None) -> bool:
        """STOPPING=1: ddtreed is shutting down the service and itself."""
        return self.send("STOPPING=1", *([_status_line(status)] if status else []))

    def reloading(self) -> bool:
        """RELOADING=1 before a config reload; send ready() when the reload is done."""
        monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec}")

    def extend_timeout(self, seconds: float) -> bool:
        """EXTEND_TIMEOUT_USEC=: ask for more time in a start or stop that is still progressing."""
        return self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def send(self, *assignments: str) -> bool:
        """Send one datagram of KEY=value lines; False (and a debug log) when it did not go out."""
        if not self.enabled or not assignments:
            return False
        message = "\n".join(assignments).encode("utf-8", "replace")
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.sendto(message, _socket_address(self.address))
        except OSError as error:
            log.debug("sd_notify_failed", address=self.address, error=str(error),
                      message=assignments[0])
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _socket_address(address: str) -> str | bytes:
    # `@name` is Linux's abstract namespace: the kernel wants a leading NUL byte instead.
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def _status_line(text: str) -> str:
    # One datagram line per assignment: a newline inside the text would start a bogus key.
    return "STATUS=" + " ".join(text.split())


def _watchdog_usec(environ: Mapping[str, str]) -> int | None:
    """WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or our pid)."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner and owner != str(os.getpid()):
        return None  # inherited from a parent that is the watched process, not us
    return usec if usec > 0 else None
