"""A local port forward through the SSH transport, so probes reach a remote service's HTTP port."""

from __future__ import annotations

import select
import socket
import threading

import structlog

from .ssh import Connection

log = structlog.get_logger(__name__)

OPEN_TIMEOUT_S = 10.0


class Tunnel:
    """Listens on 127.0.0.1:<ephemeral>; each accepted connection gets a direct-tcpip channel."""

    def __init__(self, connection: Connection, remote_address: str, remote_port: int):
        self._connection = connection
        self._remote = (remote_address, remote_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.local_port = self._listener.getsockname()[1]
        self.closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="ssh-tunnel", daemon=True)
        self._thread.start()
        log.info("fleet.tunnel_opened", host=connection.entry.name, local_port=self.local_port,
                 remote=f"{remote_address}:{remote_port}")

    def close(self) -> None:
        self.closed = True
        self._listener.close()
        self._thread.join(timeout=5.0)

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                readable, _, _ = select.select([self._listener], [], [], 0.5)
                if not readable:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            threading.Thread(target=self._forward, args=(client,), name="ssh-tunnel-conn",
                             daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        with client:
            try:
                transport = self._connection.client().get_transport()
                channel = transport.open_channel("direct-tcpip", self._remote, client.getpeername(),
                                                 timeout=OPEN_TIMEOUT_S)
            except Exception as error:  # refused remote port, lost connection: the probe sees a reset
                log.debug("fleet.tunnel_refused", remote=f"{self._remote[0]}:{self._remote[1]}",
                          error=str(error))
                return
            with channel:
                _pump(client, channel, lambda: self.closed)


def _pump(client: socket.socket, channel, stopped) -> None:
    """Copy bytes both ways until either side closes."""
    while not stopped():
        readable, _, _ = select.select([client, channel], [], [], 0.5)
        if client in readable:
            data = client.recv(65536)
            if not data:
                channel.shutdown_write()
                _drain_channel(client, channel)
                return
            channel.sendall(data)
        if channel in readable:
            data = channel.recv(65536)
            if not data:
                return
            client.sendall(data)


def _drain_channel(client: socket.socket, channel) -> None:
    """The client half-closed: pass the rest of the response back before closing."""
    channel.settimeout(OPEN_TIMEOUT_S)
    while True:
        try:
            data = channel.recv(65536)
        except TimeoutError:
            return
        if not data:
            return
        client.sendall(data)
