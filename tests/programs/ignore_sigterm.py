"""A service that ignores SIGTERM (and holds a port when asked): only SIGKILL ends it."""

import signal
import socket
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
listener = None
if len(sys.argv) > 1:
    listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("ready", flush=True)
while True:
    time.sleep(1)
