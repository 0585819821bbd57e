"""A service that says it is ready, then answers /health_generate one byte a second (for minutes).

argv: PORT MARKER — MARKER is written when a probe arrives, so a test knows a probe is in flight.
"""

import socket
import sys
import threading
import time

port, marker = int(sys.argv[1]), sys.argv[2]
listener = socket.create_server(("127.0.0.1", port))


def answer(connection: socket.socket) -> None:
    with connection:
        connection.recv(65536)
        with open(marker, "a") as handle:
            handle.write("probe\n")
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n" + b"x" * 600:
            connection.sendall(bytes([byte]))
            time.sleep(1.0)


print("[2026-01-01 00:00:00] The server is fired up and ready to roll!", file=sys.stderr, flush=True)
while True:
    client, _ = listener.accept()
    threading.Thread(target=answer, args=(client,), daemon=True).start()
