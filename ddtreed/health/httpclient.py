"""A direct HTTP/1.1 client for the supervised service: one deadline, a size cap, no proxies.

The service runs on this host (or at the end of ddtreed's own SSH tunnel), so a request must go
straight to it: `http_proxy`, `HTTP_PROXY`, `all_proxy` and `no_proxy` are never read. This is why
it is not urllib (its default opener sends 127.0.0.1 to a proxy named in the environment).

A request is bounded as a whole: connect, send and every read share one absolute deadline, so a
server trickling one byte a second cannot hold ddtreed longer than the budget. Reads are sliced
(`SLICE_S`) and `interrupted()` is asked between slices, so a stop request ends a probe promptly;
its answer is the reason (True: "ddtreed is stopping"; a string: that, e.g. "the service exited"),
and the failed request's error says it.
The answer is capped at `max_body` bytes; a larger one (claimed or sent) is a failed request.
"""

from __future__ import annotations

import json
import math
import re
import socket
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_BODY = 8 * 1024 * 1024  # /server_info and /generate are KBs; SGLang's /metrics some 100 KB
MAX_HEADER = 64 * 1024
MAX_JSON_DEPTH = 64  # SGLang's answers nest 4 deep; deeper is hostile or broken
SLICE_S = 0.2  # longest single wait, so `interrupted` is asked at least this often
STOPPING = "ddtreed is stopping"  # the reason of a plain True from `interrupted()`
MEMBER_DIED = "a member of the service's session died"  # ServiceRun.death's reason for a lost member

Interrupted = Callable[[], bool | str]  # falsy: go on; True or a reason: give up now


@dataclass(frozen=True)
class Answer:
    """An HTTP status and body, or why there is none (`status` None, `error` set)."""

    status: int | None
    body: bytes = b""
    error: str = ""


def request(base_url: str, method: str, path: str, payload: Any, deadline: float,
            clock: Callable[[], float] = time.monotonic, *, max_body: int = MAX_BODY,
            interrupted: Interrupted | None = None) -> Answer:
    """Send one request to `base_url` (http://host:port) and read the whole answer by `deadline`."""
    if clock() >= deadline:
        return Answer(None, error="deadline passed before the request")
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return Answer(None, error=f"unsupported service URL {base_url!r} (http://host:port)")
    host, port = parts.hostname, parts.port or 80
    data = b"" if payload is None else json.dumps(payload).encode()
    target = (parts.path.rstrip("/") + path) or "/"
    host_header = f"[{host}]" if ":" in host else host
    head = [f"{method} {target} HTTP/1.1", f"Host: {host_header}:{port}", "User-Agent: ddtreed",
            "Accept: */*", "Connection: close"]
    if payload is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
    try:
        with socket.create_connection((host, port), timeout=max(0.001, deadline - clock())) as sock:
            _send(sock, message, deadline, clock, interrupted)
            return _receive(sock, deadline, clock, max_body, interrupted)
    except _Failed as failure:
        return Answer(None, error=str(failure))
    except TimeoutError:
        return Answer(None, error="TimeoutError: no answer within the deadline")
    except OSError as error:  # refused, reset, unreachable, name resolution
        reason = error.strerror or str(error)
        return Answer(None, error=f"{type(error).__name__}: {reason}")


class _Failed(Exception):
    pass


def _wait_slice(sock: socket.socket, deadline: float, clock: Callable[[], float],
                interrupted: Interrupted | None, received: int) -> None:
    why = interrupted() if interrupted is not None else None
    if why:
        raise _Failed(f"interrupted: {why if isinstance(why, str) else STOPPING}")
    left = deadline - clock()
    if left <= 0:
        raise _Failed(f"TimeoutError: no complete answer within the deadline ({received} bytes received)")
    sock.settimeout(min(left, SLICE_S))


def _send(sock: socket.socket, message: bytes, deadline: float, clock: Callable[[], float],
          interrupted: Interrupted | None) -> None:
    view = memoryview(message)
    while view:
        _wait_slice(sock, deadline, clock, interrupted, 0)
        try:
            sent = sock.send(view)
        except TimeoutError:
            continue
        view = view[sent:]


def _receive(sock: socket.socket, deadline: float, clock: Callable[[], float], max_body: int,
             interrupted: Interrupted | None) -> Answer:
    buffer = bytearray()
    header: _Head | None = None
    while True:
        _wait_slice(sock, deadline, clock, interrupted, len(buffer))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if chunk:
            buffer += chunk
        if header is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEADER:
                    raise _Failed(f"headers larger than {MAX_HEADER} bytes")
                if not chunk:
                    raise _Failed("ConnectionError: the server closed the connection without an answer")
                continue
            header = _parse_head(bytes(buffer[:end]))
            del buffer[:end + 4]
            if header.length is not None and header.length > max_body:
                raise _Failed(f"answer of {header.length} bytes is over the {max_body}-byte cap")
        if len(buffer) > max_body + (64 * 1024 if header.chunked else 0):
            raise _Failed(f"answer over the {max_body}-byte cap")
        body = header.complete(buffer, eof=not chunk)
        if body is not None:
            return Answer(header.status, body)
        if not chunk:
            raise _Failed(f"ConnectionError: the answer ended early ({len(buffer)} body bytes)")


@dataclass
class _Head:
    status: int
    length: int | None
    chunked: bool

    def complete(self, buffer: bytearray, eof: bool) -> bytes | None:
        """The body once all of it is in `buffer`, else None."""
        if self.chunked:
            return _dechunk(buffer) if buffer.endswith(b"\r\n\r\n") or eof else None
        if self.length is not None:
            return bytes(buffer[:self.length]) if len(buffer) >= self.length else None
        return bytes(buffer) if eof else None  # Connection: close framing


def _parse_head(raw: bytes) -> _Head:
    lines = raw.decode("latin-1").split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
        raise _Failed(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length = None
    if not chunked and "content-length" in headers:
        if not headers["content-length"].isdigit():
            raise _Failed(f"bad Content-Length {headers['content-length'][:40]!r}")
        length = int(headers["content-length"])
    return _Head(int(fields[1]), length, chunked)


def _dechunk(buffer: bytearray) -> bytes | None:
    """The chunked body, or None while the last (zero) chunk has not arrived."""
    body, offset = bytearray(), 0
    while True:
        end = buffer.find(b"\r\n", offset)
        if end < 0:
            return None
        size_text = bytes(buffer[offset:end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _Failed(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            return bytes(body)
        start = end + 2
        if len(buffer) < start + size + 2:
            return None
        body += buffer[start:start + size]
        offset = start + size + 2


def json_object(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the JSON object, "") or (None, why not): never raises, whatever the bytes are."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    if _nesting(text) > MAX_JSON_DEPTH:
        return None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        return None, f"not JSON ({str(error)[:80]})"
    if not isinstance(value, dict):
        return None, f"not a JSON object but {type(value).__name__}"
    return value, ""


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _nesting(text: str) -> int:
    """The JSON nesting depth, brackets inside strings left out (linear-time regexes)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    depth = deepest = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def number(value: Any) -> float | None:
    """A finite JSON number (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def count(value: Any) -> int | None:
    """A JSON integer (never a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
