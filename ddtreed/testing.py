"""Hand-written fakes of the daemon's seams: a `FakeClock` and a `FakeHost` with a scripted service.

The middle tier of tests (tests/test_loop_middle.py) drives the real `Daemon` loop through them:
no process is forked, no socket opened, no second waited, so a whole incident takes milliseconds.
A test says what each launch of the service does with a `behaviour(argv, env, start) -> Launch`
function; everything else (rules, remediation engine, incident store on a real SQLite file,
restart budget, lifecycle) is the real code.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from .service.host import CommandResult
from .records import ExitStatus, HealthResult, LogChunk

READY_LINE = "The server is fired up and ready to roll!"


def founding_traceback(rank: str = "TP0", a: int = 8, b: int = 33) -> tuple[str, ...]:
    """SGLang's scheduler traceback for the founding width bug, as one rank prints it."""
    stamp = "2026-01-01 00:00:00"
    return (
        f"[{stamp} {rank}] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2968, '
        "in run_scheduler_process",
        "    scheduler.event_loop_overlap()",
        '  File "/venv/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", '
        "line 812, in replay_prepare",
        "    self.out_cache_loc[:raw_num_token].copy_(forward_batch.out_cache_loc)",
        f"RuntimeError: The size of tensor a ({a}) must match the size of tensor b ({b}) at "
        "non-singleton dimension 0",
    )


@dataclass(frozen=True)
class Launch:
    """What one start of the fake service does."""

    lines: tuple[str, ...] = (READY_LINE,)  # written to its stderr log at once
    exit_code: int | None = None  # exits right after writing (None: keeps running)
    healthy: bool = True  # /health_generate and /generate answer
    accept_length: float | None = 3.0
    crash_after_s: float | None = None  # a running service dies this long after its start...
    crash_lines: tuple[str, ...] = ()  # ...printing these first
    crash_exit_code: int | None = 1  # None: it prints them and keeps serving (a handled error)


def healthy() -> Launch:
    return Launch()


def crashing(lines: tuple[str, ...] | None = None) -> Launch:
    """Dies during startup with the founding traceback (TP0 and TP1)."""
    return Launch(lines=lines or founding_traceback("TP0") + founding_traceback("TP1"), exit_code=1)


class FakeClock:
    """Time moves only when the loop sleeps or waits: deterministic and instant."""

    def __init__(self, start: float = 1000.0, epoch: float = 1.7e9):
        self.now = start
        self.epoch = epoch
        self.alarms: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Call `action` once the clock has passed `when` (monotonic seconds)."""
        self.alarms.append((when, action))

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch + self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        due = [alarm for alarm in self.alarms if alarm[0] <= self.now]
        self.alarms = [alarm for alarm in self.alarms if alarm[0] > self.now]
        for _, action in due:
            action()


class FakeProcess:
    def __init__(self, host: "FakeHost", pid: int, launch: Launch, started_at: float):
        self.host, self.pid, self.launch, self.started_at = host, pid, launch, started_at
        self.status: ExitStatus | None = None
        self.crashed = False
        if launch.exit_code is not None:
            self.status = ExitStatus(code=launch.exit_code, signal=None)

    def _advance(self) -> None:
        """A scheduled crash happens once its time has come."""
        launch = self.launch
        if self.status is None and launch.crash_after_s is not None and not self.crashed and \
                self.host.clock.monotonic() >= self.started_at + launch.crash_after_s:
            self.crashed = True
            self.host.write(self.pid, launch.crash_lines)
            if launch.crash_exit_code is not None:
                self.status = ExitStatus(code=launch.crash_exit_code, signal=None)

    def poll(self) -> ExitStatus | None:
        self._advance()
        return self.status

    def signal_group(self, signum: int) -> bool:
        self._advance()
        if self.status is not None:
            return False
        self.status = ExitStatus(code=None, signal=signum)  # the fake obeys TERM at once
        return True

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        return self.poll()

    @property
    def alive(self) -> bool:
        return self.poll() is None


class FakeFollower:
    def __init__(self, host: "FakeHost", paths: list[str]):
        self.host, self.paths = host, list(paths)
        self.offsets = {path: 0 for path in self.paths}
        self.closed = False

    def _pending(self) -> bool:
        return any(len(self.host.logs.get(p, [])) > self.offsets[p] for p in self.paths)

    def read(self) -> list[LogChunk]:
        self.host.tick()
        chunks = []
        for path in self.paths:
            lines = self.host.logs.get(path, [])
            start = self.offsets[path]
            if len(lines) > start:
                chunks.append(LogChunk(path, start + 1, tuple(lines[start:]), self.host.clock.time()))
                self.offsets[path] = len(lines)
        return chunks

    def wait(self, timeout: float) -> bool:
        self.host.tick()
        if self._pending():
            return True
        self.host.clock.sleep(timeout)
        self.host.tick()
        return self._pending()

    def close(self) -> None:
        self.closed = True


class FakeProber:
    """Answers as the current launch of the fake service would."""

    def __init__(self, host: "FakeHost", base_url: str):
        self.host, self.base_url = host, base_url

    def _serving(self) -> Launch | None:
        process = self.host.current
        if process is None or not process.alive or not process.launch.healthy:
            return None
        return process.launch

    def health(self, deadline: float) -> HealthResult:
        launch = self._serving()
        return HealthResult(launch is not None, "health", "200 OK" if launch else "connection refused")

    def generate(self, prompt: str, max_new_tokens: int, deadline: float) -> HealthResult:
        launch = self._serving()
        if launch is None:
            return HealthResult(False, "generate", "connection refused")
        return HealthResult(True, "generate", "generated", accept_length=launch.accept_length,
                            output_text="ok", completion_tokens=max_new_tokens)


class FakeHost:
    """A `Host` whose service is a script; its files are a dict, its processes objects."""

    name = "fake"
    local = False

    def __init__(self, behaviour: Callable[[list[str], dict[str, str], int], Launch], clock: FakeClock | None = None):
        self.behaviour = behaviour
        self.clock = clock or FakeClock()
        self.files: dict[str, bytes] = {}
        self.logs: dict[str, list[str]] = {}
        self.processes: list[FakeProcess] = []
        self.launches: list[list[str]] = []  # argv of every start, in order
        self.busy_ports: set[int] = set()
        self._pids = itertools.count(4000)
        self._stderr: dict[int, str] = {}
        self.closed = False

    @property
    def current(self) -> FakeProcess | None:
        return self.processes[-1] if self.processes else None

    def prober(self, base_url: str) -> FakeProber:
        return FakeProber(self, base_url)

    def tick(self) -> None:
        for process in self.processes:
            process.poll()

    def write(self, pid: int, lines: tuple[str, ...]) -> None:
        self.logs.setdefault(self._stderr[pid], []).extend(lines)

    # ---- the Host protocol ----
    def spawn(self, argv, env, cwd, stdout_path, stderr_path) -> FakeProcess:
        self.launches.append(list(argv))
        launch = self.behaviour(list(argv), dict(env), len(self.launches))
        pid = next(self._pids)
        self._stderr[pid] = stderr_path
        self.write(pid, launch.lines)
        process = FakeProcess(self, pid, launch, self.clock.monotonic())
        self.processes.append(process)
        return process

    def run(self, argv, timeout) -> CommandResult:
        return CommandResult(127, "", f"{argv[0]}: not on the fake host")

    def read_bytes(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    def write_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        self.files[path] = bytes(data)

    def exists(self, path: str) -> bool:
        return path in self.files

    def realpath(self, path: str) -> str:
        return path

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        return None

    def port_in_use(self, address: str, port: int) -> bool:
        return port in self.busy_ports

    def sweep_session(self, session_id, name_patterns, token=None) -> list[int]:
        return []

    def session_pids(self, session_id: int) -> list[int]:
        return []

    def rotate_file(self, path, backups, over_bytes=None, copy_truncate=False) -> bool:
        """Each start rotates its logs (launch.Supervisor): the new run's file starts empty."""
        lines = self.logs.get(path)
        if not lines or (over_bytes is not None and sum(len(line) + 1 for line in lines) <= over_bytes):
            return False
        self.logs[f"{path}.1"], self.logs[path] = lines, []
        return True

    def gpu_holders(self, pids=None) -> list[int]:
        return []

    def open_follower(self, paths: list[str]) -> FakeFollower:
        return FakeFollower(self, paths)

    def http_base_url(self, address: str, port: int) -> str:
        return f"fake://{address}:{port}"

    def token_holders(self, token: str) -> list[int]:
        return []

    def leftover_tokens(self, state_dir, port) -> set[str]:
        return set()

    def sweep_token(self, token, name_patterns) -> list[int]:
        return []

    def close(self) -> None:
        self.closed = True
