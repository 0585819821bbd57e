"""A service whose descendants outlive it: one leaves the process group, one leaves the session.

argv: PIDFILE PORT. The main process exits on SIGTERM without stopping its children, like a
launcher that died before it could clean up. One grandchild stays in the session but moves to
its own process group (killpg misses it); one child calls setsid() and renames itself
`sglang::scheduler_TP0`, then its parent exits: an orphan that only its name and environment
tie to the service. Both ignore SIGTERM and hold the port open.
"""

import ctypes
import os
import signal
import socket
import sys
import time

PR_SET_NAME = 15


def park(name: bytes | None, new_session: bool, listener: socket.socket) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if new_session:
        os.setsid()
    else:
        os.setpgid(0, 0)
    if name:
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    while True:
        time.sleep(1)


pidfile, port = sys.argv[1], int(sys.argv[2])
listener = socket.create_server(("127.0.0.1", port))
pids = []
for name, new_session in ((None, False), (b"sglang::scheduler_TP0", True)):
    pid = os.fork()
    if pid == 0:
        park(name, new_session, listener)
    pids.append(pid)
listener.close()
# Publish the pids only once both children have left their group / session: readers check that.
deadline = time.monotonic() + 10
while time.monotonic() < deadline and not (os.getpgid(pids[0]) == pids[0] and os.getsid(pids[1]) == pids[1]):
    time.sleep(0.01)
with open(pidfile + ".tmp", "w") as handle:
    handle.write(" ".join(map(str, pids)))
os.replace(pidfile + ".tmp", pidfile)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
while True:
    time.sleep(1)
