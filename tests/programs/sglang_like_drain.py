"""A launcher shaped like real sglang.launch_server 0.5.16 at shutdown.

It starts a "scheduler" child in its own process group; the scheduler works on a request. On
SIGTERM the launcher logs SGLang's lines, asks the scheduler to finish (the drain), waits for it,
then SIGKILLs its own tree the way SGLang's kill_process_tree does (rc 137). A SIGTERM that also
reaches the scheduler kills it mid-request, and the launcher then logs SGLang's child-death line.

usage: sglang_like_drain.py DRAIN_SECONDS [--ignore-sigterm]
"""

import os
import signal
import subprocess
import sys
import time

SCHEDULER = r"""
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *a: setattr(sys, "drain", True))
print("scheduler: request in flight", flush=True)
while not getattr(sys, "drain", False):
    time.sleep(0.02)
time.sleep(float(sys.argv[1]))
print("scheduler: finished the request in flight", flush=True)
"""


def stamp(message):
    print(time.strftime("[%Y-%m-%d %H:%M:%S] ") + message, flush=True)


def main():
    drain_s = float(sys.argv[1])
    child = subprocess.Popen([sys.executable, "-c", SCHEDULER, str(drain_s)])
    stopping = []

    def on_sigterm(signum, frame):
        if "--ignore-sigterm" in sys.argv:
            stamp("SIGTERM ignored")
            return
        stopping.append(True)
        stamp("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        child.send_signal(signal.SIGUSR1)

    signal.signal(signal.SIGTERM, on_sigterm)
    stamp("The server is fired up and ready to roll!")
    while True:
        code = child.poll()
        if code is not None:
            if code != 0:
                stamp(f"Subprocess scheduler_0 (pid={child.pid}) crashed with exit code {code}. "
                      "Triggering SIGQUIT for cleanup...")
            elif stopping:
                stamp("Gracefully exiting... Remaining number of requests 0. Remaining requests "
                      "remaining_rids=[].")
            stamp(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, "
                  f"pid={os.getpid()}")
            os.killpg(os.getpgid(0), signal.SIGKILL)
        time.sleep(0.02)


if __name__ == "__main__":
    main()
