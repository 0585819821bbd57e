"""`ddtreed fleet status` against N real OpenSSH servers on loopback: this tree (snapshot over SFTP)
against a baseline tree (the remote `ddtreed status --json`, one Python start per host), same run.

Run as root with /usr/sbin/sshd installed (.ci/sshd-setup.sh):
    python benchmarks/fleet_status.py [--sizes 10,50,100] [--runs 3] [--baseline-ref REF] [--netns] [--out FILE]

Every host is an sshd on its own 127.0.0.1 port with its own state dir: a daemon-state.json naming
a live process (the "daemon") and an incident database with three incidents, as a host running
`ddtreed run` has. Both trees run as a user runs them (`python -m ddtreed fleet status --json`,
the CLI's start included), interleaved, so they share the load of the moment. Measured per run:
wall time, the client's CPU (the CLI and its `ssh -G` children), the remote side's CPU (every
sshd and what it started: on a real fleet that is spread over the hosts), /proc/loadavg before,
and how many remote `ddtreed` processes were started. The remote side shares this box's cores
with the client, so loopback wall time is bounded by client + remote CPU, not by round trips.

`--netns` puts each host's sshd in a network namespace of its own, on its own address (port 22,
reached over a veth pair): distinct addresses and network stacks instead of loopback ports. The
namespaces are removed at the end (also on SIGTERM).

`--remote-rc clean` (default) gives the remote sessions a HOME without shell start-up files (a
service account's); `--remote-rc box` keeps root's ~/.bashrc, which on the development box starts
pyenv (~0.2-0.3 s CPU) for every remote command, the sqlite3 query included.
Prints one JSON object, with a least-squares model (fixed + per-host) of client CPU and wall.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import sshd  # noqa: E402  (the test helper that starts real sshd instances)

BASELINE_REF = "0950c83"  # main before the SFTP path, known_hosts cache and fleet-sized pool
TICKS = os.sysconf("SC_CLK_TCK")
TIME_KEYS = ("seconds_since_update", "seconds_since_last_healthy", "service_uptime_s")


class NetnsSshd:
    """One sshd in its own network namespace, on its own address, port 22: a host of its own as far
    as the network goes (its own stack and loopback, reached over a veth pair from this namespace)."""

    def __init__(self, directory: Path, index: int, tag: str, prefix: str, authorized_keys: str, host_key: Path,
                 extra_config: str):
        self.directory, self.port = directory, 22
        self.namespace, self.veth = f"ddtb-{tag}-{index}", f"dt{tag}{index}"
        third, fourth = divmod(index * 4, 256)
        self.address, gateway = f"{prefix}.{third}.{fourth + 2}", f"{prefix}.{third}.{fourth + 1}"
        self.process: subprocess.Popen | None = None
        self.public_host_key = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
        for argv in (["netns", "add", self.namespace],
                     ["link", "add", self.veth + "a", "type", "veth", "peer", "name", self.veth + "b"],
                     ["link", "set", self.veth + "b", "netns", self.namespace],
                     ["addr", "add", f"{gateway}/30", "dev", self.veth + "a"],
                     ["link", "set", self.veth + "a", "up"],
                     ["-n", self.namespace, "addr", "add", f"{self.address}/30", "dev", self.veth + "b"],
                     ["-n", self.namespace, "link", "set", self.veth + "b", "up"],
                     ["-n", self.namespace, "link", "set", "lo", "up"]):
            subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "authorized_keys").write_text(authorized_keys)
        config = directory / "sshd_config"
        config.write_text(
            f"Port 22\nListenAddress {self.address}\nHostKey {host_key}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPidFile {directory / 'sshd.pid'}\n"
            "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\nMaxStartups 200\n"
            "MaxSessions 64\nLogLevel INFO\n" + extra_config)
        os.makedirs("/run/sshd", exist_ok=True)
        # `ip netns exec` enters the namespace and execs sshd: the pid is sshd's (its CPU is counted).
        self.process = subprocess.Popen(["ip", "netns", "exec", self.namespace, sshd.SSHD, "-D", "-f", str(config),
                                         "-E", str(directory / "sshd.log")], stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection((self.address, 22), timeout=1) as probe:
                    if probe.recv(4).startswith(b"SSH-"):
                        break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise TimeoutError(f"sshd in {self.namespace} did not answer") from None
                time.sleep(0.05)

    @property
    def host_key_line(self) -> str:
        return f"{self.address} {self.public_host_key}"

    def stop(self) -> None:
        sshd.stop_process(self.process)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, check=False, timeout=30)
        subprocess.run(["ip", "link", "del", self.veth + "a"], capture_output=True, check=False, timeout=30)


def netns_available() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    name = f"ddtb-probe-{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None


def start_servers(directory: Path, count: int, extra_config: str,
                  netns: bool = False) -> tuple[list, Path, Path]:
    """`count` sshd processes sharing one host key and one client key (keygen is the slow part);
    with `netns`, each in its own network namespace on its own address."""
    client_key = directory / "client_key"
    client_public = sshd.keygen(client_key)
    host_key = directory / "hostkey"
    sshd.keygen(host_key)
    servers: list = []
    tag, prefix = f"{os.getpid() % 4096:03x}", f"10.{200 + os.getpid() % 50}"
    try:
        for index in range(count):
            if netns:
                servers.append(NetnsSshd(directory / f"host{index:03d}", index, tag, prefix, client_public + "\n",
                                         host_key, extra_config))
            else:
                servers.append(sshd.start_sshd(directory / f"host{index:03d}", client_public + "\n",
                                               host_key=host_key, extra_config=extra_config))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    known_hosts = directory / "known_hosts"
    known_hosts.write_text("".join(server.host_key_line + "\n" for server in servers))
    return servers, client_key, known_hosts


def populate_state_dirs(directory: Path, servers: list[sshd.Sshd], daemon_pid: int, database: bool = True) -> None:
    """Each host's state dir: a live daemon's snapshot and a 3-incident database (one template copied)."""
    from ddtreed.incidents import Store, database_path
    from ddtreed.ops.status import DaemonStatus, write_status

    template = directory / "template-state"
    template.mkdir(mode=0o700)
    with Store(database_path(template)) as store:
        for _ in range(3):
            store.open_incident("crash")
    for server in servers:
        state = server.directory / "state"
        state.mkdir(mode=0o700)
        if database:
            shutil.copy2(database_path(template), database_path(state))
        write_status(state, DaemonStatus(pid=daemon_pid, state="running", status_text="serving, accept len 3.4",
                                         service_pid=daemon_pid, service_started_at=time.time(),
                                         last_healthy_at=time.time()))


def write_inventory(path: Path, servers: list[sshd.Sshd], client_key: Path, known_hosts: Path,
                    ddtreed_command: str) -> Path:
    text = (f'[defaults]\nuser = "root"\nidentity_file = "{client_key}"\nknown_hosts = "{known_hosts}"\n'
            f'ssh_config = "{path.parent / "no_ssh_config"}"\nddtreed = {json.dumps(ddtreed_command)}\n'
            'command_timeout_s = 300\nconnect_timeout_s = 120\n')
    for index, server in enumerate(servers):
        text += (f'\n[[host]]\nname = "host{index:03d}"\naddress = "{getattr(server, "address", "127.0.0.1")}"\n'
                 f'port = {server.port}\n'
                 f'state_dir = "{server.directory / "state"}"\n')
    path.write_text(text)
    return path


def remote_cpu_s(servers: list[sshd.Sshd]) -> float:
    """CPU of every sshd master and of the sessions it reaped (utime+stime+cutime+cstime)."""
    total = 0
    for server in servers:
        try:
            fields = Path(f"/proc/{server.process.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])
    return total / TICKS


def box_busy_s() -> float:
    """CPU seconds all processes on the box used (every core), from /proc/stat."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / TICKS


def fleet_status(tree: Path, inventory: Path, servers: list[sshd.Sshd], starts: Path,
                 concurrency: int | None = None) -> dict:
    """One `ddtreed fleet status --json` as a user runs it, from `tree`; its costs and answers."""
    starts.write_text("")
    load = Path("/proc/loadavg").read_text().split()[:3]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    remote_before, box_before = remote_cpu_s(servers), box_busy_s()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory", str(inventory),
                           "--json", *(["--concurrency", str(concurrency)] if concurrency else [])],
                          capture_output=True, text=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)}, timeout=1800)
    wall = time.monotonic() - started
    time.sleep(0.2)  # let the sshd masters reap the last sessions before their CPU is read
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    remote = remote_cpu_s(servers) - remote_before
    box = box_busy_s() - box_before
    report = json.loads(done.stdout)
    hosts = len(report["hosts"])
    failures = {host["error"]: host["detail"] for host in report["hosts"] if not host["ok"]}
    return {"wall_s": round(wall, 2), "client_cpu_s": round(client, 2), "remote_cpu_s": round(remote, 2),
            "box_cpu_s": round(box, 2), "loadavg_before": " ".join(load),
            # cores that other processes on the box used meanwhile (the load this run competed with)
            "others_cores": round(max(0.0, box - client - remote) / wall, 2),
            "per_host_wall_ms": round(1000 * wall / hosts, 1),
            "per_host_client_cpu_ms": round(1000 * client / hosts, 1),
            "per_host_remote_cpu_ms": round(1000 * remote / hosts, 1),
            "ok": sum(host["ok"] for host in report["hosts"]), "failures": failures,
            "remote_ddtreed_starts": len(starts.read_text().splitlines()),
            "_answers": {host["name"]: host["result"] for host in report["hosts"] if host["ok"]}}


def same_answers(first: dict, second: dict) -> bool:
    """The two trees said the same for every host, apart from "seconds since" taken at another moment."""
    def strip(answer: dict) -> dict:
        return {key: value for key, value in answer.items() if key not in TIME_KEYS}

    return first.keys() == second.keys() and all(strip(first[name]) == strip(second[name]) for name in first)


def baseline_tree(directory: Path, ref: str) -> tuple[Path | None, str]:
    """`ref` of this repository unpacked into `directory` (git archive), or None and why not."""
    target = directory / "baseline"
    target.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True,
                                 timeout=120)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True, timeout=120)
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"no baseline: git archive {ref} failed ({error})"
    return target, commit


def fit(points: list[tuple[int, float]]) -> dict:
    """Least squares y = fixed + per_host * hosts over every run."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return {"fixed_s": round(mean_y - slope * mean_x, 3), "per_host_ms": round(1000 * slope, 2)}


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"min": ordered[0], "median": ordered[len(ordered) // 2], "max": ordered[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the baseline tree ('' for none)")
    parser.add_argument("--remote-rc", choices=("clean", "box"), default="clean")
    parser.add_argument("--no-database", action="store_true",
                        help="state dirs without an incident database (no sqlite3 query on the fast path)")
    parser.add_argument("--concurrency", type=int, help="this tree's --concurrency (default: its own)")
    parser.add_argument("--netns", action="store_true",
                        help="each host an sshd in its own network namespace on its own address (port 22)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if not sshd.available():
        print("needs root, /usr/sbin/sshd and ssh-keygen (run .ci/sshd-setup.sh)", file=sys.stderr)
        return 2
    if args.netns and (why := netns_available()):
        print(f"--netns: no network namespaces here: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below removes what was made
    sizes = [int(size) for size in args.sizes.split(",")]
    result: dict = {"benchmark": "fleet status", "cpus": os.cpu_count(), "machine": platform.platform(),
                    "remote_rc": args.remote_rc, "sqlite3_on_host": shutil.which("sqlite3") is not None,
                    "host": ("sshd in its own network namespace on its own address, port 22 (a veth pair each)"
                             if args.netns else "sshd on its own 127.0.0.1 port") + "; state dir: live daemon snapshot"
                            + ("" if args.no_database else " + 3-incident database"),
                    "sizes": sizes, "runs_per_size": args.runs, "current_concurrency": args.concurrency or "default",
                    "runs": []}
    with tempfile.TemporaryDirectory(prefix="ddtreed-fleet-bench-") as temp:
        directory = Path(temp)
        baseline, note = baseline_tree(directory, args.baseline_ref) if args.baseline_ref else (None, "none")
        result["baseline"] = note
        result["current"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
        home = directory / "remote-home"
        home.mkdir()
        extra = f"SetEnv HOME={home}\n" if args.remote_rc == "clean" else ""
        daemon = subprocess.Popen(["sleep", "86400"])  # the process every snapshot names as its daemon
        started = time.monotonic()
        servers, client_key, known_hosts = start_servers(directory, max(sizes), extra, netns=args.netns)
        result["sshd_start_s"] = round(time.monotonic() - started, 2)
        try:
            populate_state_dirs(directory, servers, daemon.pid, database=not args.no_database)
            starts = directory / "remote-ddtreed-starts"
            wrapper = directory / "remote-ddtreed"
            wrapper.write_text(f'#!/bin/sh\necho "$*" >> {starts}\nexec {sshd.REMOTE_DDTREED} "$@"\n')
            wrapper.chmod(0o755)
            for size in sizes:
                inventory = write_inventory(directory / f"inv{size}.toml", servers[:size], client_key,
                                            known_hosts, str(wrapper))
                for index in range(args.runs):
                    run: dict = {"hosts": size, "run": index + 1}
                    if baseline is not None:
                        run["baseline"] = fleet_status(baseline, inventory, servers, starts)
                    run["current"] = fleet_status(REPO, inventory, servers, starts, args.concurrency)
                    if baseline is not None:
                        run["same_answers"] = same_answers(run["baseline"].pop("_answers"),
                                                           run["current"]["_answers"])
                    run["current"].pop("_answers")
                    result["runs"].append(run)
                    print(json.dumps(run), file=sys.stderr)
        finally:
            for server in servers:
                server.stop()
            daemon.kill()
            daemon.wait()
    for side in ("baseline", "current"):
        runs = [run for run in result["runs"] if side in run]
        if not runs:
            continue
        result[f"{side}_summary"] = {
            str(size): {key: summary([run[side][key] for run in runs if run["hosts"] == size])
                        for key in ("wall_s", "client_cpu_s", "remote_cpu_s")}
            for size in sizes}
        if len(sizes) > 1:
            result[f"{side}_model"] = {
                key: fit([(run["hosts"], run[side][key]) for run in runs])
                for key in ("wall_s", "client_cpu_s", "remote_cpu_s")}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
