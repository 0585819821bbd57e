"""Wall time of `ddtreed fleet status` against N real OpenSSH servers on loopback (N = 10, 50, 100).

Run as root with /usr/sbin/sshd installed (.ci/sshd-setup.sh):
    .venv/bin/python benchmarks/fleet_status.py [--sizes 10,50,100] [--out result.json]
Prints one JSON object. The remote side of every host is this machine, so each remote
`ddtreed status` (a Python start) competes for the same cores as the client: a floor, not a fleet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import sshd  # noqa: E402  (the test helper that starts real sshd instances)


def start_servers(directory: Path, count: int) -> tuple[list[sshd.Sshd], Path, Path]:
    """`count` sshd processes sharing one host key and one client key (keygen is the slow part)."""
    client_key = directory / "client_key"
    client_public = sshd.keygen(client_key)
    host_key = directory / "hostkey"
    sshd.keygen(host_key)
    servers: list[sshd.Sshd] = []
    try:
        for index in range(count):
            servers.append(sshd.start_sshd(directory / f"host{index:03d}", client_public + "\n",
                                           host_key=host_key))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    known_hosts = directory / "known_hosts"
    known_hosts.write_text("".join(server.host_key_line + "\n" for server in servers))
    return servers, client_key, known_hosts


def write_inventory(path: Path, servers: list[sshd.Sshd], client_key: Path, known_hosts: Path,
                    ddtreed_command: str) -> Path:
    text = (f'[defaults]\nuser = "root"\nidentity_file = "{client_key}"\nknown_hosts = "{known_hosts}"\n'
            f'ssh_config = "{path.parent / "no_ssh_config"}"\nddtreed = {json.dumps(ddtreed_command)}\n'
            f'state_dir = "{path.parent / "state"}"\ncommand_timeout_s = 300\n')
    for index, server in enumerate(servers):
        text += f'\n[[host]]\nname = "host{index:03d}"\naddress = "127.0.0.1"\nport = {server.port}\n'
    path.write_text(text)
    return path


def fleet_status(inventory: Path) -> dict:
    """One `ddtreed fleet status --json` as a user runs it; wall time includes the CLI's own start."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory", str(inventory),
                           "--json"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=900)
    wall = time.monotonic() - started
    report = json.loads(done.stdout)
    failures = {host["error"]: host["detail"] for host in report["hosts"] if not host["ok"]}
    return {"wall_s": round(wall, 2), "fleet_elapsed_s": report["elapsed_s"],
            "ok": sum(host["ok"] for host in report["hosts"]), "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if not sshd.available():
        print("needs root, /usr/sbin/sshd and ssh-keygen (run .ci/sshd-setup.sh)", file=sys.stderr)
        return 2
    sizes = [int(size) for size in args.sizes.split(",")]
    result = {"benchmark": "fleet status", "concurrency": 16, "cpus": os.cpu_count(),
              "machine": platform.platform(), "remote": "ddtreed status --json (python start per host)",
              "runs": []}
    with tempfile.TemporaryDirectory(prefix="ddtreed-fleet-bench-") as temp:
        directory = Path(temp)
        started = time.monotonic()
        servers, client_key, known_hosts = start_servers(directory, max(sizes))
        result["sshd_start_s"] = round(time.monotonic() - started, 2)
        try:
            for size in sizes:
                chosen = servers[:size]
                real = write_inventory(directory / f"inv{size}.toml", chosen, client_key, known_hosts,
                                       sshd.REMOTE_DDTREED)
                # The same fleet with a remote command that costs nothing: the SSH share of the time.
                bare = write_inventory(directory / f"bare{size}.toml", chosen, client_key, known_hosts,
                                       "sh -c 'echo {}'")
                result["runs"].append({"hosts": size, "status": fleet_status(real),
                                       "ssh_only": fleet_status(bare)})
        finally:
            for server in servers:
                server.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
