"""Tell others: systemd (sd_notify: ready, status, watchdog) and people (hooks: webhook, command).

The sd_notify protocol is one datagram of `KEY=value` lines to the AF_UNIX socket named in $NOTIFY_SOCKET
(a path, or `@name` in the abstract namespace). Without that variable every call is a no-op, and
no call ever raises: a supervisor must not die because the service manager went away. The hooks
are described further down (`Hooks`).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

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
        self._dropping = False  # the manager's queue was full at the last send

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
            # Never wait: a manager that is not reading (its queue of datagrams full) must not
            # stop the main loop; the message is dropped instead (the next ping follows soon).
            self._socket.sendto(message, socket.MSG_DONTWAIT, _socket_address(self.address or ""))
        except BlockingIOError:
            if not self._dropping:  # once per spell, not once a second
                log.warning("sd_notify_dropped", address=self.address, message=assignments[0],
                            hint="the service manager is not reading its notification socket")
            self._dropping = True
            return False
        except OSError as error:
            log.debug("sd_notify_failed", address=self.address, error=str(error),
                      message=assignments[0])
            return False
        self._dropping = False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


# WATCHDOG=1 at most this often (and at least every half of WatchdogSec, as systemd asks): the loop
# turns up to ~50 times a second in a log flood, and a datagram per turn is a system call per turn.
WATCHDOG_PING_S = 1.0


class WatchdogPing:
    """Call on every loop turn: `notifier.watchdog()` when due, at most every WATCHDOG_PING_S and
    at least every `watchdog_interval()`; nothing when no watchdog is set."""

    def __init__(self, notifier: Notifier, monotonic):
        interval = notifier.watchdog_interval()
        self._notifier, self._monotonic = notifier, monotonic
        self._every = min(WATCHDOG_PING_S, interval) if interval else None
        self._at = float("-inf")  # monotonic time of the next ping

    def __call__(self) -> None:
        if self._every is not None and (now := self._monotonic()) >= self._at:
            self._notifier.watchdog()
            self._at = now + self._every


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


# --- hooks: tell a person ------------------------------------------------------------------
#
# On the events a person must act on, ddtreed runs the configured hooks: a webhook receiving the
# JSON below as a POST body and/or an executable receiving it on stdin. Deliveries run on one
# worker thread (never the daemon loop), each attempt under `timeout_s`, retried `retries` times
# with doubling delays; every delivery ends in a record (`DeliveryRecord`) that the daemon loop
# collects with `Hooks.completed()` and stores in the incident.

EVENTS = ("escalated", "gave-up", "silent-corruption", "recurrence")
_QUEUE_LIMIT = 256  # pending notifications; beyond it a notification is recorded as dropped
_OUTPUT_TAIL = 2000  # bytes of a hook's stdout/stderr kept in its record
WEBHOOK_SCHEMES = ("http", "https")


def notification(event: str, incident: Mapping[str, object], diagnosis: object = None,
                 error_lines: list[str] | tuple[str, ...] = (), host: str | None = None,
                 max_lines: int = 50) -> dict[str, object]:
    """The JSON document hooks receive (`schema` 1): what happened, to what, and the evidence."""
    from .. import __version__

    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(EVENTS)}, got {event!r}")
    return {
        "schema": 1,
        "event": event,
        "host": host or socket.gethostname(),
        "sent_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "ddtreed_version": __version__,
        "incident": dict(incident),
        "diagnosis": diagnosis,
        "last_error_lines": list(error_lines)[-max_lines:],
    }


_INCIDENT_KEYS = ("id", "source", "service", "category", "status", "outcome", "fingerprint", "exception",
                  "message", "remediation_id", "started_at", "resolved_at", "frozen")
_DIAGNOSIS_KEYS = ("rule_id", "title", "diagnosis", "advice", "params", "remediations")


def incident_notification(event: str, incident: Mapping[str, object], host: str | None = None,
                          extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """The notification for an incident as `Store.get(id)` returns it: its last error lines are
    the excerpts of its tracebacks (the first rank's, then the others'). `extra` joins the incident
    (e.g. {"canary": …} for silent corruption, {"verified_fix": …} for a recurrence)."""
    summary = {key: incident.get(key) for key in _INCIDENT_KEYS if key in incident}
    summary.update(extra or {})
    diagnosis = {key: incident.get(key) for key in _DIAGNOSIS_KEYS if key in incident}
    lines: list[str] = []
    tracebacks = incident.get("tracebacks")
    for crash in tracebacks if isinstance(tracebacks, (list, tuple)) else ():
        if isinstance(crash, Mapping):
            lines += [str(line) for line in crash.get("excerpt") or ()]
    return notification(event, summary, diagnosis, lines, host=host)


def delivery_step(record: DeliveryRecord) -> tuple[str, str, dict[str, object]]:
    """(step name, detail, data) for `Store.add_step(record.incident_id, *delivery_step(record))`."""
    outcome = "delivered" if record.ok else f"failed: {record.error}"
    detail = f"{record.event} notification via {record.hook} {record.target}: {outcome} " \
             f"({record.attempts} attempt{'s' if record.attempts != 1 else ''})"
    return ("notified" if record.ok else "notify-failed"), detail, record.to_dict()


@dataclass(frozen=True)
class DeliveryRecord:
    """How one hook delivery went: `ok`, after how many attempts, and the last answer or error."""

    event: str
    incident_id: object
    hook: str  # "webhook" or "command"
    target: str  # the URL (without credentials) or argv[0]
    ok: bool
    attempts: int
    status: int | None = None  # HTTP status, or the command's exit status
    error: str | None = None
    output: str = ""  # the tail of the command's stdout and stderr, or of the HTTP answer
    started_at: float = 0.0
    finished_at: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def check_hooks(webhook: str | None, command: tuple[str, ...], timeout_s: float, retries: int,
                retry_delay_s: float, events: tuple[str, ...]) -> str | None:
    """Why a [notify] section cannot work (one line naming the key), or None."""
    if webhook is not None:
        parts = urllib.parse.urlsplit(webhook)
        if parts.scheme not in WEBHOOK_SCHEMES or not parts.hostname:
            return f"notify.webhook must be an http:// or https:// URL, got {webhook!r}"
    if command and not command[0]:
        return "notify.command must start with the executable"
    if timeout_s <= 0:
        return f"notify.timeout_s must be > 0, got {timeout_s}"
    if retries < 0:
        return f"notify.retries must be >= 0, got {retries}"
    if retry_delay_s < 0:
        return f"notify.retry_delay_s must be >= 0, got {retry_delay_s}"
    unknown = [event for event in events if event not in EVENTS]
    if unknown:
        return f"notify.events: unknown event {unknown[0]!r} (known: {', '.join(EVENTS)})"
    return None


class Hooks:
    """The configured hooks and their worker thread. Without any hook, `send` records nothing."""

    def __init__(self, webhook: str | None = None, command: tuple[str, ...] | list[str] = (),
                 timeout_s: float = 10.0, retries: int = 2, retry_delay_s: float = 2.0,
                 events: tuple[str, ...] | list[str] = ()):
        problem = check_hooks(webhook, tuple(command), timeout_s, retries, retry_delay_s, tuple(events))
        if problem:
            raise ValueError(problem)
        self.webhook = webhook
        self.command = tuple(command)
        self.timeout_s = timeout_s
        self.retries = retries
        self.retry_delay_s = retry_delay_s
        self.events = tuple(events) or EVENTS
        self._queue: queue.Queue = queue.Queue(maxsize=_QUEUE_LIMIT)
        self._done: list[DeliveryRecord] = []
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_config(cls, notify: object) -> Hooks:
        """From config.NotifyConfig (or anything with the same attributes)."""
        return cls(webhook=getattr(notify, "webhook", None), command=getattr(notify, "command", ()),
                   timeout_s=getattr(notify, "timeout_s", 10.0), retries=getattr(notify, "retries", 2),
                   retry_delay_s=getattr(notify, "retry_delay_s", 2.0), events=getattr(notify, "events", ()))

    @property
    def configured(self) -> bool:
        return bool(self.webhook or self.command)

    def send(self, document: Mapping[str, object]) -> bool:
        """Queue `document` (see `notification`) for every hook; never blocks. False: not queued."""
        event = str(document.get("event"))
        if not self.configured or event not in self.events:
            return False
        self._start()
        with self._lock:
            self._pending += 1
            self._idle.clear()
        try:
            self._queue.put_nowait(dict(document))
        except queue.Full:
            incident = document.get("incident") or {}
            self._finish([DeliveryRecord(event, _incident_id(incident), "queue", "", False, 0,
                                         error=f"dropped: {_QUEUE_LIMIT} notifications already pending")])
            return False
        return True

    def completed(self) -> list[DeliveryRecord]:
        """Records of the deliveries finished since the last call (the daemon stores them)."""
        with self._lock:
            done, self._done = self._done, []
        return done

    def wait_idle(self, timeout: float) -> bool:
        """Block until every queued notification is delivered or given up (True), or `timeout`."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Give pending deliveries up to `timeout`, then stop the worker (at daemon shutdown)."""
        self.wait_idle(timeout)
        self._closing.set()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=1.0)

    # --- the worker -------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="ddtreed-hooks", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            document = self._queue.get()
            if document is None:
                return
            records = []
            try:
                if self.webhook:
                    records.append(self._deliver(document, "webhook", _safe_url(self.webhook), self._post))
                if self.command:
                    records.append(self._deliver(document, "command", self.command[0], self._run))
            except Exception as error:  # a bug here must not kill the worker and strand the queue
                records.append(DeliveryRecord(str(document.get("event")),
                                              _incident_id(document.get("incident") or {}), "internal", "",
                                              False, 0, error=repr(error)))
            self._finish(records)

    def _finish(self, records: list[DeliveryRecord]) -> None:
        with self._lock:
            self._done.extend(records)
            self._pending -= 1
            if self._pending <= 0:
                self._pending = 0
                self._idle.set()
        for record in records:
            (log.info if record.ok else log.warning)(
                "notify.delivered" if record.ok else "notify.failed", notify_event=record.event,
                incident_id=record.incident_id, hook=record.hook, target=record.target,
                attempts=record.attempts, status=record.status, error=record.error)

    def _deliver(self, document: dict, hook: str, target: str, attempt) -> DeliveryRecord:
        body = json.dumps(document, default=str).encode()
        started = time.time()
        status, error, output, attempts = None, None, "", 0
        for attempts in range(1, self.retries + 2):
            ok, status, error, output = attempt(body)
            if ok:
                break
            if attempts <= self.retries and self._closing.wait(self.retry_delay_s * 2 ** (attempts - 1)):
                break  # shutting down: no more retries
        else:
            ok = False
        return DeliveryRecord(str(document.get("event")), _incident_id(document.get("incident") or {}),
                              hook, target, ok, attempts, status, None if ok else error, output,
                              started, time.time())

    def _post(self, body: bytes) -> tuple[bool, int | None, str | None, str]:
        # urllib on purpose: a webhook is outside, so the site's proxy settings apply to it. Imported
        # here: urllib.request brings http.client and email (~1 MB of RSS) a daemon without webhooks never uses.
        import urllib.request

        call = urllib.request.Request(self.webhook or "", data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "ddtreed"})
        try:
            with urllib.request.urlopen(call, timeout=self.timeout_s) as answer:
                text = answer.read(_OUTPUT_TAIL).decode("utf-8", "replace")
                return 200 <= answer.status < 300, answer.status, None, text
        except urllib.error.HTTPError as error:
            text = error.read(_OUTPUT_TAIL).decode("utf-8", "replace")
            return False, error.code, f"HTTP {error.code}", text
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            return False, None, f"{type(reason).__name__}: {reason}", ""

    def _run(self, body: bytes) -> tuple[bool, int | None, str | None, str]:
        environment = scrub_environment(os.environ)
        try:
            process = subprocess.Popen(list(self.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, env=environment, start_new_session=True,
                                       close_fds=True)
        except OSError as error:
            return False, None, f"cannot run {self.command[0]}: {error.strerror or error}", ""
        try:
            output, _ = process.communicate(body, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            output = b""
            return False, None, f"timed out after {self.timeout_s:g}s (process group killed)", ""
        text = output[-_OUTPUT_TAIL:].decode("utf-8", "replace")
        if process.returncode != 0:
            return False, process.returncode, f"exit status {process.returncode}", text
        return True, 0, None, text


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass


def _incident_id(incident: object) -> object:
    return incident.get("id") if isinstance(incident, Mapping) else None


def _safe_url(url: str) -> str:
    """The URL without user:password, for records and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        parts = parts._replace(netloc=netloc)
    return urllib.parse.urlunsplit(parts._replace(query=""))  # tokens often ride in the query


DRAIN_STOP_S = 2.0  # at a stop, pending notifications get this long (a prompt SIGTERM)
DRAIN_GAVE_UP_S = 30.0  # at a give-up, the person must hear of it before ddtreed exits


class IncidentHooks:
    """The [notify] hooks as the loop uses them: tell a person about an incident, and store each
    finished delivery as a step of its incident (on the loop thread, the store's one writer)."""

    def __init__(self, settings: object, store: Any):
        self.settings, self.store = settings, store
        self.hooks = Hooks.from_config(settings)

    def tell(self, event: str, incident_id: int | None, extra: dict | None = None) -> None:
        """Run the hooks for `event` about this incident; never blocks (a worker delivers)."""
        if not self.hooks.configured:
            return
        try:
            incident = self.store.get(incident_id) if incident_id is not None else {}
        except (KeyError, ValueError, OSError) as error:
            log.warning("notify.incident_unreadable", incident_id=incident_id, error=str(error))
            incident = {"id": incident_id}
        self.hooks.send(incident_notification(event, incident, extra=extra))

    def record(self, hooks: Hooks | None = None) -> None:
        """Store finished deliveries as incident steps."""
        for done in (hooks or self.hooks).completed():
            if isinstance(done.incident_id, int):
                try:
                    self.store.add_step(done.incident_id, *delivery_step(done))
                except (KeyError, ValueError) as error:  # the incident was pruned meanwhile
                    log.warning("notify.record_lost", incident_id=done.incident_id, error=str(error))

    def gave_up(self, incident_id: int | None) -> None:
        """The restart budget is spent: tell a person, and give the delivery time before the exit."""
        self.tell("gave-up", incident_id, {"reason": "the restart budget is spent; the service stays down"})
        self.hooks.wait_idle(DRAIN_GAVE_UP_S)

    def reconfigure(self, settings: object, drain_s: float = DRAIN_STOP_S) -> None:
        """A reload: new hooks from now on when the settings changed; the old ones finish first."""
        if settings == self.settings:
            return
        old, self.settings, self.hooks = self.hooks, settings, Hooks.from_config(settings)
        old.close(drain_s)
        self.record(old)

    def close(self, drain_s: float = DRAIN_STOP_S) -> None:
        self.hooks.close(drain_s)
        self.record()
